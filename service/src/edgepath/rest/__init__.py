"""REST transport (FastAPI): converts, calls the plane, maps errors."""
