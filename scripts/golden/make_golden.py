#!/usr/bin/env python3
"""Turns oracle output into the golden data under crates/skyconf-core/tests/data/golden.

usage:
  make_golden.py scalars CORPUS_DIR ORACLE OUT_JSON
      CORPUS_DIR from scalar_corpus.py; writes {scalar text: Java string, or "ERROR" when the
      OAP refuses the one-key document or its value is null}.
  make_golden.py docs LIST ORACLE OURS OUT_DIR
      LIST/ORACLE/OURS as for compare.py. Copies every hand-written edge document (e*.yaml) and
      a fixed, class-stratified choice of generated ones into OUT_DIR/docs as NAME.yaml with the
      oracle's JSON line as NAME.json, and writes OUT_DIR/classes.json: {NAME.yaml: class} for
      every copied document that is not "same" (compare.py's classes), so the test knows which
      refusals are intended (deviation:*) or known (known:*).

skyconf's own output is used only to classify documents, never as an expectation.
"""

import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

# How many generated documents of each class to keep (edge documents are always kept); the
# generated ones are the first of their class in corpus order that are at most 3 kB.
QUOTA = {"same": 90, "both-refuse": 25, "deviation:partial-table": 20}
QUOTA_OTHER = 4
MAX_GENERATED_BYTES = 3000


def read_lines(path):
    return open(path, encoding="utf-8").read().rstrip("\n").split("\n")


def scalars(corpus, oracle, out):
    cands = json.load(open(os.path.join(corpus, "index.json"), encoding="utf-8"))
    lines = read_lines(oracle)
    assert len(cands) == len(lines), (len(cands), len(lines))
    table = {}
    for text, line in zip(cands, lines):
        got = json.loads(compare.repair(line))
        if "error" in got or "__truncated_by" in got:
            table[text] = "ERROR"
        else:
            table[text] = got["s"]["config"][0][1]
    with open(out, "w", encoding="utf-8") as f:
        json.dump(table, f, ensure_ascii=False, indent=0, sort_keys=True)
        f.write("\n")
    print(len(table), "scalars ->", out)


def docs(list_path, oracle, ours, out):
    paths = open(list_path, encoding="utf-8").read().splitlines()
    ora, our = read_lines(oracle), read_lines(ours)
    assert len(paths) == len(ora) == len(our)
    target = os.path.join(out, "docs")
    if os.path.isdir(target):
        shutil.rmtree(target)
    os.makedirs(target)
    taken, classes, counts, generated = 0, {}, {}, {}
    for p, o, u in zip(paths, ora, our):
        name = os.path.basename(p)
        text = open(p, encoding="utf-8", newline="").read()
        cls = compare.classify(text, o, u)
        if cls == "same" and "error" in json.loads(compare.repair(o)):
            bucket = "both-refuse"
        else:
            bucket = cls
        if not name.startswith("e"):
            if len(text.encode("utf-8")) > MAX_GENERATED_BYTES:
                continue
            if generated.get(bucket, 0) >= QUOTA.get(bucket, QUOTA_OTHER):
                continue
            generated[bucket] = generated.get(bucket, 0) + 1
        counts[bucket] = counts.get(bucket, 0) + 1
        shutil.copyfile(p, os.path.join(target, name))
        with open(os.path.join(target, name[:-5] + ".json"), "w", encoding="utf-8") as f:
            f.write(compare.repair(o) + "\n")
        if cls != "same":
            classes[name] = cls
        taken += 1
    with open(os.path.join(out, "classes.json"), "w", encoding="utf-8") as f:
        json.dump(classes, f, ensure_ascii=False, indent=1, sort_keys=True)
        f.write("\n")
    print(taken, "documents ->", target, dict(sorted(counts.items())))
    if "MISMATCH" in counts:
        print("warning: %d documents differ from the oracle (classed MISMATCH); the test will fail"
              % counts["MISMATCH"])


def main():
    mode = sys.argv[1]
    if mode == "scalars":
        scalars(*sys.argv[2:5])
    elif mode == "docs":
        docs(*sys.argv[2:6])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
