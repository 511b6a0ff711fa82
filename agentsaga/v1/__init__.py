"""Generated gRPC and protobuf code (see tools/gen_protos.py)."""
