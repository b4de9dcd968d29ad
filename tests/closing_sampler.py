"""A sampler for tests/integration/test_run_closes_sampler.py: the HF sampler that counts its
``close()`` calls in a class-level list (the run builds it from the config by its path)."""

from __future__ import annotations

from mintrl.sampler.hf import HFSampler

CLOSED: list[int] = []


class CountingSampler(HFSampler):
    """:class:`HFSampler` recording each ``close()`` call in :data:`CLOSED`."""

    def close(self) -> None:
        CLOSED.append(1)
        super().close()
