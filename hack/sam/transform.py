#!/usr/bin/env python3
"""Turn template.yaml into the plain CloudFormation that `sam deploy` makes
CloudFormation run, without the SAM CLI or the network.

`sam deploy` uploads the built code, points CodeUri at it and hands the
template to CloudFormation, which runs the template's transform,
AWS::Serverless-2016-10-31 (SAM). This script does the same locally, for an
emulator whose CloudFormation runs no transforms: SAM's own translator
(aws-sam-translator), with the managed-policy map cfn-lint ships (the same
file the SAM CLI bundles), so no AWS call is made. A template that needs
another transform (AWS::LanguageExtensions) is refused.

Usage:
  python3 hack/sam/transform.py --template template.yaml \
      --code-uri s3://BUCKET/KEY --region us-east-1 \
      --parameter AsgNames=a,b --parameter ClusterName=c > out.json

--code-uri replaces the CodeUri of every AWS::Serverless::Function, as
`sam deploy` (sam package) does after uploading the built artifact.
Errors go to stderr with a non-zero exit.
"""

import argparse
import json
import os
import sys


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--template", required=True)
    p.add_argument("--code-uri", required=True, help="s3://bucket/key of the uploaded artifact")
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--parameter", action="append", default=[], metavar="NAME=VALUE")
    return p.parse_args()


def check_plain(template, params):
    """The template must need no transform but SAM's (no Fn::ForEach: the
    Serverless Application Repository and every SAM CLI version take it),
    and every parameter without a default must be given, as CloudFormation
    requires."""
    transforms = template.get("Transform", [])
    if isinstance(transforms, str):
        transforms = [transforms]
    if transforms != ["AWS::Serverless-2016-10-31"]:
        raise SystemExit(f"transform: the template's transforms are {transforms}, want AWS::Serverless-2016-10-31 alone")
    missing = [n for n, spec in template.get("Parameters", {}).items() if "Default" not in spec and n not in params]
    if missing:
        raise SystemExit("transform: parameters without a default need a value: " + ", ".join(sorted(missing)))
    unknown = [n for n in params if n not in template.get("Parameters", {})]
    if unknown:
        raise SystemExit("transform: unknown parameters: " + ", ".join(sorted(unknown)))


def sam_translate(template, region, params, code_uri):
    from cfnlint.data import Serverless
    from cfnlint.helpers import load_resource
    from samtranslator.parser import parser
    from samtranslator.public.exceptions import InvalidDocumentException
    from samtranslator.translator.translator import Translator

    for res in template.get("Resources", {}).values():
        if res.get("Type") == "AWS::Serverless::Function":
            res.setdefault("Properties", {})["CodeUri"] = code_uri
    os.environ["AWS_DEFAULT_REGION"] = region  # the translator's ARN partition
    policies = load_resource(Serverless, "ManagedPolicies.json")
    translator = Translator(managed_policy_map=policies, sam_parser=parser.Parser())
    try:
        return translator.translate(
            sam_template=template,
            parameter_values=dict(params),
            get_managed_policy_map=lambda: policies,
        )
    except InvalidDocumentException as e:
        raise SystemExit("transform: SAM: " + "; ".join(c.message for c in e.causes))


def main():
    args = parse_args()
    from cfnlint.decode import decode

    template, matches = decode(args.template)
    if matches:
        raise SystemExit("transform: reading the template: " + "; ".join(m.message for m in matches))
    params = {}
    for kv in args.parameter:
        name, sep, value = kv.partition("=")
        if not sep:
            raise SystemExit(f"transform: --parameter {kv!r} is not NAME=VALUE")
        params[name] = value
    check_plain(template, params)
    out = sam_translate(template, args.region, params, args.code_uri)
    json.dump(out, sys.stdout, indent=1, sort_keys=True, default=str)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
