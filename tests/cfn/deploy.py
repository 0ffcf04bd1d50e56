#!/usr/bin/env python3
"""CloudFormation side of the deployed-stack test
(crates/worker/tests/stack_deploy.rs): deploys a template into the local
stack's CloudFormation (moto) and reports what it created, as JSON on stdout.

    deploy.py create --endpoint URL --template FILE --stack NAME [--param K=V ...]
    deploy.py delete --endpoint URL --stack NAME [--prefix TABLE_PREFIX]

`create` waits for CREATE_COMPLETE (failing with the stack's reason
otherwise) and prints {"status", "outputs", "resources", "skipped",
"task_definition", "task_role_policies"}:

- resources: logical id -> {"type", "physical"} of every resource created;
- skipped: how many resources the emulator left out without creating them
  (moto lists resource types it does not implement with an empty id);
- task_role_policies: the TaskRole's inline policies as IAM returns them
  (name -> document; moto leaves null where !If chose AWS::NoValue);
- task_definition: the TaskDefinition resource as the ECS API returns it
  (volumes and the first container: command, environment, mount points,
  readonlyRootFilesystem), i.e. with every intrinsic function resolved by
  the CloudFormation engine itself, not by this script.

`delete` deletes the stack and, with --prefix, what the stack keeps on
deletion (DeletionPolicy: Retain) or the worker created: the tables named
<prefix>-* and <prefix>_* (deletion protection turned off first) and the
queues named <prefix>-*.

Region and credentials come from the usual AWS_* variables. Uses boto3 (the
local stack's moto venv has it); talks only to the given endpoint.
"""

import argparse
import ast
import json
import os
import sys
import time

import boto3


def client(service, endpoint):
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return boto3.client(service, endpoint_url=endpoint, region_name=region)


def policy_document(doc):
    """A policy document as a dict: moto returns the one a stack created as
    the Python repr of a dict (with None where !If chose AWS::NoValue)."""
    if isinstance(doc, dict):
        return doc
    try:
        return json.loads(doc)
    except ValueError:
        return ast.literal_eval(doc)


def create(args):
    cf = client("cloudformation", args.endpoint)
    with open(args.template, encoding="utf-8") as f:
        body = f.read()
    params = []
    for p in args.param:
        key, sep, value = p.partition("=")
        if not sep:
            sys.exit(f"--param {p!r}: expected KEY=VALUE")
        params.append({"ParameterKey": key, "ParameterValue": value})
    cf.create_stack(
        StackName=args.stack,
        TemplateBody=body,
        Parameters=params,
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"],
    )
    deadline = time.monotonic() + args.timeout
    while True:
        stack = cf.describe_stacks(StackName=args.stack)["Stacks"][0]
        status = stack["StackStatus"]
        if not status.endswith("_IN_PROGRESS"):
            break
        if time.monotonic() > deadline:
            sys.exit(f"stack {args.stack} still {status} after {args.timeout} s")
        time.sleep(0.5)
    if status != "CREATE_COMPLETE":
        sys.exit(f"stack {args.stack}: {status}: {stack.get('StackStatusReason')}")

    outputs = {o["OutputKey"]: o.get("OutputValue", "") for o in stack.get("Outputs", [])}
    resources, skipped = {}, 0
    pages = cf.get_paginator("list_stack_resources").paginate(StackName=args.stack)
    for page in pages:
        for r in page["StackResourceSummaries"]:
            if not r.get("LogicalResourceId"):
                skipped += 1
                continue
            resources[r["LogicalResourceId"]] = {
                "type": r["ResourceType"],
                "physical": r.get("PhysicalResourceId", ""),
            }

    task_definition = None
    td = resources.get("TaskDefinition")
    if td:
        ecs = client("ecs", args.endpoint)
        got = ecs.describe_task_definition(taskDefinition=td["physical"])["taskDefinition"]
        container = got["containerDefinitions"][0]
        task_definition = {
            "volumes": got.get("volumes", []),
            "container": {
                k: container.get(k)
                for k in (
                    "name",
                    "command",
                    "environment",
                    "mountPoints",
                    "readonlyRootFilesystem",
                    "user",
                )
            },
        }
    task_role_policies = {}
    role = resources.get("TaskRole")
    if role:
        iam = client("iam", args.endpoint)
        for policy in iam.list_role_policies(RoleName=role["physical"])["PolicyNames"]:
            doc = iam.get_role_policy(RoleName=role["physical"], PolicyName=policy)
            task_role_policies[policy] = policy_document(doc["PolicyDocument"])
    json.dump(
        {
            "status": status,
            "outputs": outputs,
            "resources": resources,
            "skipped": skipped,
            "task_definition": task_definition,
            "task_role_policies": task_role_policies,
        },
        sys.stdout,
        default=str,
    )


def delete(args):
    client("cloudformation", args.endpoint).delete_stack(StackName=args.stack)
    deleted = [args.stack]
    if args.prefix:
        ddb = client("dynamodb", args.endpoint)
        for page in ddb.get_paginator("list_tables").paginate():
            for name in page["TableNames"]:
                if name.startswith(args.prefix + "-") or name.startswith(args.prefix + "_"):
                    try:
                        ddb.update_table(TableName=name, DeletionProtectionEnabled=False)
                    except ddb.exceptions.ClientError:
                        pass  # already off, or the emulator does not model it
                    ddb.delete_table(TableName=name)
                    deleted.append(name)
        sqs = client("sqs", args.endpoint)
        for url in sqs.list_queues(QueueNamePrefix=args.prefix + "-").get("QueueUrls", []):
            sqs.delete_queue(QueueUrl=url)
            deleted.append(url)
    json.dump({"deleted": deleted}, sys.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("create")
    c.add_argument("--endpoint", required=True)
    c.add_argument("--template", required=True)
    c.add_argument("--stack", required=True)
    c.add_argument("--param", action="append", default=[])
    c.add_argument("--timeout", type=float, default=120)
    d = sub.add_parser("delete")
    d.add_argument("--endpoint", required=True)
    d.add_argument("--stack", required=True)
    d.add_argument("--prefix")
    args = parser.parse_args()
    {"create": create, "delete": delete}[args.command](args)


if __name__ == "__main__":
    main()
