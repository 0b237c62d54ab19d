"""Speculative decoding: draft proposers and the verification of drafts (issue #31).

Below the executor and above nothing else in the package: the scheduler asks the proposer
for drafts, the model runner verifies them (docs/architecture.md, "Speculative decoding").
"""
