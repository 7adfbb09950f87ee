"""gRPC transport (grpcio, asyncio): converts, calls the plane, maps errors."""
