"""Plain on-disk storage: ``.npy`` arrays plus one ``meta.json``, written atomically.

Every writer in salientpp goes through :func:`atomic_output_dir` (or :func:`atomic_output_file`),
so an interrupted or failed run never leaves a directory that looks complete, and the temporaries
of killed runs are removed by the next one. Output paths are checked before the work
(:func:`check_output_dir`, :func:`check_writable_dir`, :func:`check_writable_file`), and an
``OSError`` of writing (full disk, read-only file system, no permission, a path through a file)
becomes one sentence (:func:`write_error`, :func:`output_errors`).

One module per concern, each importing only those above it in this list:

- :mod:`.text`: strict JSON (:func:`strict_json`);
- :mod:`.inputs`: an input path checked to be a regular file (:func:`check_input_file`);
- :mod:`.arrays`: ``.npy`` files and the ``meta.json`` that lists them with their checksums;
- :mod:`.outputs`: output paths checked before the work, written atomically, write errors as one sentence;
- :mod:`.locks`: ``flock`` on an output, so two runs never write the same one.

The names below are this package's interface: import them from ``salientpp.io``.
"""
from .arrays import (NpyWriter, check_torch_file, file_checksum, load_array, load_listed, meta_count,
                     npy_header, read_meta, read_rows, row_chunks, save_array, write_meta)
from .inputs import check_input_file
from .locks import check_unlocked, output_lock
from .outputs import (WRITE_ERRNOS, atomic_output_dir, atomic_output_file, check_output_dir, check_output_location,
                      check_output_paths, check_writable_dir, check_writable_file, completed_output, holds_files,
                      mark_complete, os_error_sentence, output_errors, output_parents, owning_directory, pid_alive,
                      remove_stale_temporaries, remove_stale_temporaries_in, replace_file, write_error,
                      write_text_atomic)
from .text import NULL_REASONS, strict_json

__all__ = [
    "NULL_REASONS", "NpyWriter", "WRITE_ERRNOS", "atomic_output_dir", "atomic_output_file", "check_input_file",
    "check_output_dir", "check_output_location", "check_output_paths", "check_torch_file", "check_unlocked",
    "check_writable_dir", "check_writable_file", "completed_output", "file_checksum", "holds_files", "load_array",
    "load_listed", "mark_complete", "meta_count", "npy_header", "os_error_sentence", "output_errors", "output_lock",
    "output_parents", "owning_directory", "pid_alive", "read_meta", "read_rows", "remove_stale_temporaries",
    "remove_stale_temporaries_in", "replace_file", "row_chunks", "save_array", "strict_json", "write_error",
    "write_meta", "write_text_atomic",
]
