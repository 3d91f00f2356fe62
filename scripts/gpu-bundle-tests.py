#!/usr/bin/env python3
"""Turns `ctest --show-only=json-v1` (stdin) into the bundle's tests.tsv (stdout): per ctest entry
its name, program, arguments, environment but KILN_CACHE_DIR (the bundle's run gives each entry
its own), the output patterns that make it a skip or a failure, why the bundle leaves it out
(empty: it runs) and a note. Tab-separated, "-" for an empty field. Used by scripts/gpu-bundle.

What cannot run outside the build tree is left out here, with the reason the run prints:
programs that run cmake on the build tree, and cases that read paths compiled into the test."""
import json
import os
import sys

# Entries the bundle cannot run: they need the build tree, cmake or a compiler.
LEFT_OUT = {
    "test_layers": "builds probes in the build tree with cmake (not in the bundle)",
    "test_install": "installs the build tree with cmake and compiles a consumer (not in the bundle)",
    "test_cache_tool": "runs kiln_cache_worker and kiln at paths compiled into it (the build tree's)",
}
# The data-parallel suites start kiln_dist_worker, kiln and gpt_train at the build tree's paths.
for _name in ("test_dist_collectives", "test_dist_ddp", "test_dist_faults"):
    LEFT_OUT[_name] = "starts kiln_dist_worker and kiln at paths compiled into it (the build tree's)"
# Cases that read a file at a path compiled into the test (KILN_TEST_FIXTURES, the source tree):
# left out of their suite's entry by a Boost.Test filter.
CASES_LEFT_OUT = {
    "test_nn_state": [
        ("state_dicts/the_fixture_from_another_writer_loads_with_its_exact_values",
         "reads tests/fixtures at the source tree's path, compiled in"),
    ],
}


def field(s):
    s = s.replace("\t", " ").replace("\n", " ")
    return s if s else "-"


def main():
    data = json.load(sys.stdin)
    out = []
    for test in data.get("tests", []):
        name = test["name"]
        command = test.get("command") or []
        if not command:
            continue
        program = os.path.basename(command[0])
        args = list(command[1:])
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        env = [e for e in props.get("ENVIRONMENT", []) if not e.startswith("KILN_CACHE_DIR=")]
        skip_re = props.get("SKIP_REGULAR_EXPRESSION", [])
        fail_re = props.get("FAIL_REGULAR_EXPRESSION", [])
        note = ""
        cases = CASES_LEFT_OUT.get(name, [])
        if cases:
            # The entry's filter names its file's suite (`--run_test=test_x[:!test_x/...]`).
            filters = [f"!{name}/{c}" for c, _ in cases]
            for i, a in enumerate(args):
                if a.startswith("--run_test="):
                    args[i] = a + ":" + ":".join(filters)
                    break
            else:
                sys.exit(f"gpu-bundle: {name}: its ctest entry has no --run_test filter")
            note = "; ".join(f"{c} left out: {why}" for c, why in cases)
        if any(" " in a or "\t" in a for a in args) or any(" " in e for e in env):
            sys.exit(f"gpu-bundle: {name}: an argument or variable with a space is not supported")
        out.append("\t".join([
            field(name), field(program), field(" ".join(args)), field(" ".join(env)),
            field("|".join(skip_re)), field("|".join(fail_re)), field(LEFT_OUT.get(name, "")),
            field(note)]))
    if not out:
        sys.exit("gpu-bundle: ctest lists no tests (was the build configured with KILN_BUILD_TESTS?)")
    print("\n".join(out))


if __name__ == "__main__":
    main()
