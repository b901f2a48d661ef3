#!/usr/bin/env python3
"""Lists the test executables of a `cargo test --no-run --message-format=json` build.

One line per binary: NAME<TAB>PACKAGE_DIR<TAB>EXECUTABLE. Tests run with PACKAGE_DIR as their
working directory, as `cargo test` does.
"""
import json
import os
import sys

seen = set()
for line in open(sys.argv[1], encoding="utf-8"):
    try:
        msg = json.loads(line)
    except json.JSONDecodeError:
        continue
    if msg.get("reason") != "compiler-artifact" or not msg.get("profile", {}).get("test"):
        continue
    exe = msg.get("executable")
    if not exe or exe in seen:
        continue
    seen.add(exe)
    target = msg["target"]
    pkg = msg["package_id"].split("#")[-1].split("@")[0].split("/")[-1]
    name = f"{pkg}::{target['name']}" if target["kind"] != ["lib"] else f"{pkg}::lib"
    print(f"{name}\t{os.path.dirname(msg['manifest_path'])}\t{exe}")
