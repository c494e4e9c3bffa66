"""Generated protobuf and gRPC stubs of the dial.v1 API (made from proto/
when the package is built; never committed)."""
