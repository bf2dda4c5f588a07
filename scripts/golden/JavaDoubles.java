// Prints Double.toString for each IEEE-754 bit pattern (16 hex digits) read from stdin, one
// "<bits> <string>" line each. Run on the JDK whose output skyconf must match (17).
import java.io.*;

public class JavaDoubles {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        PrintWriter out = new PrintWriter(new BufferedWriter(new OutputStreamWriter(System.out)));
        String line;
        while ((line = in.readLine()) != null) {
            long bits = Long.parseUnsignedLong(line.trim(), 16);
            out.println(line.trim() + " " + Double.toString(Double.longBitsToDouble(bits)));
        }
        out.flush();
    }
}
