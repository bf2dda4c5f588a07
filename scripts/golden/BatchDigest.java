// Runs the OAP-equivalent DigestTool (../shared/bench/javaref) once per document path read from
// stdin, in one JVM, and prints its JSON line for each. A throwable DigestTool lets escape (a
// StackOverflowError on a deeply recursive document, say) becomes {"error": "<class>"}.
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

public class BatchDigest {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream stdout = new PrintStream(System.out, true, "UTF-8");
        String path;
        while ((path = in.readLine()) != null) {
            ByteArrayOutputStream captured = new ByteArrayOutputStream();
            System.setOut(new PrintStream(captured, true, "UTF-8"));
            try {
                DigestTool.main(new String[] {path});
            } catch (Throwable t) {
                System.out.println("{\"error\": \"" + t.getClass().getSimpleName() + "\"}");
            } finally {
                System.setOut(stdout);
            }
            stdout.print(captured.toString("UTF-8"));
            stdout.flush();
        }
    }
}
