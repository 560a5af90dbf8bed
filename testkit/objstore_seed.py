"""Fills the object storage test servers (testkit/src/objstore.rs) with files,
through each provider's own client, independent of rankscope's code:

  objstore_seed.py s3-user ENDPOINT
      creates an IAM user with full access on a moto server whose first
      requests are unauthenticated; prints {"key": ..., "secret": ...}
  objstore_seed.py s3 ENDPOINT KEY SECRET BUCKET PREFIX FILE...
      creates BUCKET (boto3) and uploads each FILE as PREFIX + its name
  objstore_seed.py s3-public ENDPOINT KEY SECRET BUCKET OBJECT
      makes one object public-read (for plain https:// GETs)
  objstore_seed.py azure BLOB_ENDPOINT CONTAINER PREFIX FILE...
      the same on azurite (azure-storage-blob, the development account)

Runs in the venv of `make objstore-servers`.
"""

import json
import os
import sys

AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def s3_client(endpoint, key, secret):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
    )


def s3_user(endpoint):
    import boto3

    iam = boto3.client(
        "iam",
        endpoint_url=endpoint,
        aws_access_key_id="seed",
        aws_secret_access_key="seed",
        region_name="us-east-1",
    )
    iam.create_user(UserName="rankscope-test")
    iam.put_user_policy(
        UserName="rankscope-test",
        PolicyName="all",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
            }
        ),
    )
    k = iam.create_access_key(UserName="rankscope-test")["AccessKey"]
    print(json.dumps({"key": k["AccessKeyId"], "secret": k["SecretAccessKey"]}))


def s3(endpoint, key, secret, bucket, prefix, files):
    c = s3_client(endpoint, key, secret)
    c.create_bucket(Bucket=bucket)
    for f in files:
        c.upload_file(f, bucket, prefix + os.path.basename(f))


def s3_public(endpoint, key, secret, bucket, obj):
    s3_client(endpoint, key, secret).put_object_acl(Bucket=bucket, Key=obj, ACL="public-read")


def azure(blob_endpoint, container, prefix, files):
    from azure.storage.blob import BlobServiceClient

    svc = BlobServiceClient(
        account_url=blob_endpoint,
        credential={"account_name": "devstoreaccount1", "account_key": AZURITE_KEY},
    )
    c = svc.create_container(container)
    for f in files:
        with open(f, "rb") as data:
            c.upload_blob(prefix + os.path.basename(f), data)


def main(argv):
    cmd, args = argv[1], argv[2:]
    if cmd == "s3-user":
        s3_user(*args)
    elif cmd == "s3":
        s3(*args[:5], args[5:])
    elif cmd == "s3-public":
        s3_public(*args)
    elif cmd == "azure":
        azure(*args[:3], args[3:])
    else:
        sys.exit(f"unknown command {cmd!r}")


if __name__ == "__main__":
    main(sys.argv)
