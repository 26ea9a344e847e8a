"""Backends that exist only to be found, refused or driven by the registry's tests."""
