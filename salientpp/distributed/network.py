"""An emulated cluster network for the row exchange (``--network RATE[,LATENCY]``).

On one machine the ranks exchange rows over loopback, which moves gigabytes per second and
hides what a cluster's network costs. With a :class:`Network`, every all-to-all of the row
exchange (:class:`~salientpp.distributed.exchange.RowExchange`: the counts, ids and rows of
feature fetches, the embedding's lookups and gradients, full-graph and layer-wise halos) takes
the time its bytes would take on a link of ``rate`` bytes per second per rank and direction,
plus ``latency`` per collective, as a NIC would:

* each rank has one link (:class:`EmulatedLink`); its collectives are serialised on it, so a
  collective starts on the link when the previous one has finished there;
* a collective keeps the link for ``latency + max(bytes sent, bytes received) / rate`` (full
  duplex: sending and receiving overlap); rows a rank keeps for itself cross no link;
* the ranks start their collectives in lockstep, so a receiver that has finished waits for a
  slower sender at the next collective, which cannot complete before that sender arrives.

The collective itself runs as before (the bytes are the same); the rank then sleeps until its
link would have finished, which costs no CPU. Nothing changes but time: losses and weights are
the same bit for bit with and without the emulation.

Rates follow tc's units: ``bit``, ``kbit``, ``mbit``, ``gbit``, ``tbit`` (bits per second) and
``bps``, ``kbps``, ``mbps``, ``gbps`` (bytes per second); latencies ``s``, ``ms``, ``us``, ``ns``.
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass

from ..errors import InputError

# Bits per second of each rate unit (tc's: "bit" units count bits, "bps" units count bytes).
_RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
               "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}
_LATENCY_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_EXAMPLE = "write RATE[,LATENCY] such as 1gbit,50us or 200mbit"


@dataclass(frozen=True)
class Network:
    """The emulated link of every rank.

    Attributes:
        rate: bytes per second per rank and direction.
        latency: seconds each collective adds.
    """

    rate: float
    latency: float = 0.0

    def seconds(self, bytes_out: int, bytes_in: int) -> float:
        """How long one collective keeps a rank's link: ``latency + max(out, in) / rate``."""
        return self.latency + max(bytes_out, bytes_in) / self.rate

    def __str__(self) -> str:
        return f"{self.rate * 8 / 1e9:g} Gbit/s per rank and direction, {self.latency * 1e6:g} us per collective"


def _number(text: str, units: dict[str, float], what: str, spec: str) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*([a-zA-Z]+)\s*", text)
    if not match or match.group(2).lower() not in units:
        raise InputError(f"--network {spec!r} has no {what} with a unit ({', '.join(units)}); {_EXAMPLE}")
    return float(match.group(1)) * units[match.group(2).lower()]


def parse_network(text: str) -> Network:
    """``"1gbit,50us"`` -> ``Network(rate=1.25e8, latency=5e-5)``; :class:`InputError` (one
    sentence) for anything else. The rate must be positive; the latency is 0 when left out."""
    parts = str(text).split(",")
    if len(parts) > 2:
        raise InputError(f"--network {text!r} has more than a rate and a latency; {_EXAMPLE}")
    rate = _number(parts[0], _RATE_UNITS, "rate", text) / 8
    latency = _number(parts[1], _LATENCY_UNITS, "latency", text) if len(parts) == 2 else 0.0
    if not rate > 0:
        raise InputError(f"--network {text!r} has a rate of 0; {_EXAMPLE}")
    return Network(rate, latency)


class EmulatedLink:
    """One rank's link: :meth:`reserve` books a collective on it and returns when the link would
    have finished; :meth:`wait_until` sleeps until then. Safe to use from several threads."""

    def __init__(self, network: Network):
        self.network = network
        self._free_at = 0.0
        self._lock = threading.Lock()

    def reserve(self, bytes_out: int, bytes_in: int) -> float:
        """Book a collective that sends ``bytes_out`` and receives ``bytes_in`` bytes, starting
        now or when the link is free; returns the ``time.monotonic()`` at which it is done."""
        with self._lock:
            start = max(time.monotonic(), self._free_at)
            self._free_at = start + self.network.seconds(bytes_out, bytes_in)
            return self._free_at

    @staticmethod
    def wait_until(deadline: float) -> None:
        """Sleep (no CPU) until ``time.monotonic()`` reaches ``deadline``."""
        remaining = deadline - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)
