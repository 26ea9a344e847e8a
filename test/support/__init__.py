"""Harnesses shared by the tests of every part: processes, DDS peers, stores, fleets."""
