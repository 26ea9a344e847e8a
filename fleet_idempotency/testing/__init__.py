"""For backend authors: run the conformance checks against your robot backend.

``BackendUnderTest`` describes your backend to the checks; ``AgentUnderTest`` is a real
agent process driving it, with a test-side node; ``conformance`` holds the checks
(import them into a test module of yours). See docs/backends.md.
"""

from .agent_under_test import AgentUnderTest, BackendUnderTest, CommandSpec, ConformanceFailure

__all__ = ["AgentUnderTest", "BackendUnderTest", "CommandSpec", "ConformanceFailure"]
