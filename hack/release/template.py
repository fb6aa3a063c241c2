#!/usr/bin/env python3
"""Package template.yaml for a release: python3 template.py TEMPLATE ZIP VERSION

Writes to stdout the SAM template of a release: the function's code is the
zip beside it (CodeUri: ZIP, a path relative to the template, which
`sam deploy` and `aws cloudformation package` upload), the `sam build`
Metadata (BuildMethod: makefile) is gone, and the stack's description names
the version. Everything else is the repository's template, byte for byte.
The edits are textual so the comments and short tags (!Ref, !Sub) stay; each
must match exactly once, or nothing is written.
"""
import sys


def replace_once(text, old, new, what):
    n = text.count(old)
    if n != 1:
        sys.exit(f"template.py: {what}: expected once, found {n} times: {old!r}")
    return text.replace(old, new, 1)


def main(path, zip_name, version):
    with open(path) as f:
        text = f.read()
    text = replace_once(
        text,
        "  NodeDrainerFunction:\n"
        "    Type: AWS::Serverless::Function\n"
        "    Metadata:\n"
        "      # sam build runs `make build-NodeDrainerFunction` in CodeUri (the top-level Makefile).\n"
        "      BuildMethod: makefile\n"
        "    Properties:\n",
        "  NodeDrainerFunction:\n"
        "    Type: AWS::Serverless::Function\n"
        "    Properties:\n",
        "the function's sam build Metadata",
    )
    text = replace_once(text, "      CodeUri: .\n", f"      CodeUri: {zip_name}\n", "the function's CodeUri")
    text = replace_once(text, "Description: >-\n  node-drainer: ", f"Description: >-\n  node-drainer {version}: ",
                        "the stack's description")
    header = (
        f"# node-drainer {version}: the release's SAM template (made by `make dist` from\n"
        f"# template.yaml). The code is {zip_name}, beside this file:\n"
        "#   sam deploy --template-file template.yaml --guided --capabilities CAPABILITY_IAM\n"
        "# or `aws cloudformation package` it to an S3 bucket first.\n"
    )
    sys.stdout.write(header + text)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: template.py TEMPLATE ZIP VERSION")
    main(*sys.argv[1:])
