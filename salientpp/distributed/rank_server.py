"""Imported by the fork server that starts local ranks, first, and nowhere else
(:data:`~salientpp.distributed.group.RANK_PRELOAD`): the server ends with the launcher that
started it. Each rank asks the kernel for SIGKILL at its parent's death, so its ranks end then too,
even a stopped one, which holds the server open and whose own watchdog thread cannot run.
"""
import os

from .group import die_with_parent

die_with_parent(os.getppid())
