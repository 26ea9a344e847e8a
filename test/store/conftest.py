"""The store tests' backend fixtures: each test that asks for a store runs on both engines."""

from support.store_support import fresh_store_config, store_location

__all__ = ["fresh_store_config", "store_location"]
