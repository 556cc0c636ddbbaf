"""Client of a Keyhouse license server, with `cryptography` as its one dependency."""
from .core import (
    CLOCK_TOLERANCE_SECONDS, MANIFEST_SKEW_SECONDS, MAX_BACKOFF_SECONDS, MIN_FAILING_INTERVAL_SECONDS,
    USAGE_RETRIES, USAGE_RETRY_DELAY_SECONDS, Client, FileStore, KeyhouseError, LeaseError, Verdict, error_code, hash_component, in_container,
    instance_id, machine_components, verify_lease, verify_manifest, verify_offline_export, write_file_atomic,
)

__all__ = [
    "CLOCK_TOLERANCE_SECONDS", "MANIFEST_SKEW_SECONDS", "MAX_BACKOFF_SECONDS", "MIN_FAILING_INTERVAL_SECONDS",
    "USAGE_RETRIES", "USAGE_RETRY_DELAY_SECONDS", "Client", "FileStore", "KeyhouseError", "LeaseError", "Verdict", "error_code", "hash_component", "in_container",
    "instance_id", "machine_components", "verify_lease", "verify_manifest", "verify_offline_export", "write_file_atomic",
]
