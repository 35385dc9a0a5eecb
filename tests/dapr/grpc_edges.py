"""The edges of lockd's Dapr gRPC listener, through the Python SDK's own
generated stubs (host/lockd/tests/dapr.rs runs it):
  DAPR_GRPC_ENDPOINT  lockd's --dapr-grpc-listen address
  TOKEN               the server's token ("" if it has none)
  STORE               a lock store the server serves (default "edges")
  NOT_CONFIGURED      if set, the server's components declare no lock store:
                      checks only Dapr's error for that
Prints one line per check; exits 1 at the first failed check."""

import os
import sys

import grpc
from dapr.proto.runtime.v1 import dapr_pb2_grpc
from dapr.proto import api_v1

channel = grpc.insecure_channel(os.environ["DAPR_GRPC_ENDPOINT"])
stub = dapr_pb2_grpc.DaprStub(channel)
token = os.environ.get("TOKEN", "")
auth = [("authorization", f"Bearer {token}")] if token else []


def check(what, got, want):
    if got != want:
        print(f"FAIL {what}: got {got!r}, want {want!r}", flush=True)
        sys.exit(1)
    print(f"ok {what}", flush=True)


def code_of(call, *args, **kwargs):
    try:
        call(*args, **kwargs)
        return ("OK", "")
    except grpc.RpcError as e:
        return (e.code().name, e.details())


if token:
    code, message = code_of(stub.GetMetadata, api_v1.GetMetadataRequest())
    check("no token: unauthenticated", code, "UNAUTHENTICATED")
    code, _ = code_of(stub.GetMetadata, api_v1.GetMetadataRequest(),
                      metadata=[("authorization", "Bearer wrong")])
    check("wrong token: unauthenticated", code, "UNAUTHENTICATED")

meta = stub.GetMetadata(api_v1.GetMetadataRequest(), metadata=auth)
check("metadata id", meta.id, "lockd")

if os.environ.get("NOT_CONFIGURED"):
    # daprd checks the expiry before it looks for lock stores.
    check("no lock store configured: expiry 0", code_of(stub.TryLockAlpha1, api_v1.TryLockRequest(
        store_name="s", resource_id="r", lock_owner="o", expiry_in_seconds=0), metadata=auth),
          ("INVALID_ARGUMENT", "ExpiryInSeconds is not positive in lock store s"))
    for what, call, request in (
        ("lock", stub.TryLockAlpha1, api_v1.TryLockRequest(
            store_name="s", resource_id="r", lock_owner="o", expiry_in_seconds=10)),
        ("unlock", stub.UnlockAlpha1, api_v1.UnlockRequest(
            store_name="s", resource_id="r", lock_owner="o")),
    ):
        check(f"no lock store configured: {what}", code_of(call, request, metadata=auth),
              ("FAILED_PRECONDITION", "lock store s is not configured"))
    sys.exit(0)

code, message = code_of(stub.GetState, api_v1.GetStateRequest(store_name="s", key="k"), metadata=auth)
check("other Dapr methods: unimplemented", code, "UNIMPLEMENTED")
check("the message says lockd serves only the lock API", "lockd serves only Dapr's lock API" in message, True)

store = "x" * 200
code, message = code_of(stub.TryLockAlpha1, api_v1.TryLockRequest(
    store_name=store, resource_id="r", lock_owner="o", expiry_in_seconds=10), metadata=auth)
check("unknown store: invalid argument", code, "INVALID_ARGUMENT")
check("unknown store: Dapr's message", message.startswith(f"lock store {store} is not found"), True)
store = os.environ.get("STORE", "edges")
for expiry in (0, -5):
    code, message = code_of(stub.TryLockAlpha1, api_v1.TryLockRequest(
        store_name=store, resource_id="r", lock_owner="o", expiry_in_seconds=expiry), metadata=auth)
    check(f"expiry {expiry}: invalid argument", (code, message),
          ("INVALID_ARGUMENT", f"ExpiryInSeconds is not positive in lock store {store}"))
code, message = code_of(stub.TryLockAlpha1, api_v1.TryLockRequest(
    store_name=store, resource_id="r", lock_owner="o", expiry_in_seconds=2**31 - 1), metadata=auth)
check("expiry over lockd's maximum: invalid argument", (code, "is over the maximum" in message),
      ("INVALID_ARGUMENT", True))
code, message = code_of(stub.UnlockAlpha1, api_v1.UnlockRequest(
    store_name=store, resource_id="", lock_owner="o"), metadata=auth)
check("unlock without a resource id", (code, message),
      ("INVALID_ARGUMENT", f"ResourceId is empty in lock store {store}"))
code, message = code_of(stub.TryLockAlpha1, api_v1.TryLockRequest(
    store_name=store, resource_id="r", lock_owner="", expiry_in_seconds=10), metadata=auth)
check("lock without an owner", (code, message),
      ("INVALID_ARGUMENT", f"LockOwner is empty in lock store {store}"))
