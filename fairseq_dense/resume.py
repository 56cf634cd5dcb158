"""Resume from the newest checkpoint that loads when ``checkpoint_last.pt`` does not.

fairseq writes the first file of a save atomically (``<name>.tmp``, then a rename)
but *copies* it to the other names due at that moment, ``checkpoint_last.pt``
last (``PathManager.copy``, not atomic): a kill during that copy leaves a
truncated ``checkpoint_last.pt`` while the file it was copied from is intact, and
fairseq's automatic resume then fails. :func:`recover_checkpoint_last` puts the
newest checkpoint that loads in its place (keeping the unreadable file beside it,
with a warning naming both); the ``translation_exact_resume`` and
``translation_weighted`` tasks call it before fairseq-train loads
``checkpoint_last.pt``. :func:`newest_loadable_checkpoint` also serves error
messages that name the file to pass to ``--restore-file``.
"""

import glob
import logging
import os
import shutil
import zipfile
from typing import Optional, Tuple

import torch

logger = logging.getLogger(__name__)

LAST = "checkpoint_last.pt"
#: suffix of the unreadable ``checkpoint_last.pt`` kept by :func:`recover_checkpoint_last`
UNREADABLE_SUFFIX = ".unreadable"


def is_complete_checkpoint(path: str) -> bool:
    """Whether ``path`` is a complete zip archive (what ``torch.save`` writes; a cut copy is not)."""
    return os.path.isfile(path) and zipfile.is_zipfile(path)


def newest_loadable_checkpoint(save_dir: str, exclude: str = LAST) -> Optional[Tuple[str, int]]:
    """The most recently written ``checkpoint*.pt`` of ``save_dir`` that ``torch.load`` reads.

    Args:
        save_dir: the ``--save-dir`` folder.
        exclude: a file name not to consider (the unreadable one).

    Returns:
        ``(path, number of updates)``, or None if no checkpoint loads.
    """
    paths = [p for p in glob.glob(os.path.join(save_dir, "checkpoint*.pt")) if os.path.basename(p) != exclude]
    for path in sorted(paths, key=os.path.getmtime, reverse=True):
        if not is_complete_checkpoint(path):
            continue
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # any failure to read means "does not load"
            continue
        history = state.get("optimizer_history") or [{}]
        return path, int(history[-1].get("num_updates", 0))
    return None


def recover_checkpoint_last(save_dir: str) -> Optional[str]:
    """Replace an unreadable ``save_dir/checkpoint_last.pt`` by the newest checkpoint that loads.

    Nothing happens when ``checkpoint_last.pt`` is missing (a first launch) or
    complete, or when no other checkpoint loads (fairseq's own error then names the
    file). Otherwise the unreadable file is kept as ``checkpoint_last.pt.unreadable``
    and the newest loadable checkpoint is copied over ``checkpoint_last.pt``
    atomically (a temporary file, then a rename: the name never disappears).

    Returns:
        the path of the checkpoint training resumes from, or None if nothing was done.
    """
    last = os.path.join(save_dir, LAST)
    if not os.path.isfile(last) or is_complete_checkpoint(last):
        return None
    found = newest_loadable_checkpoint(save_dir)
    if found is None:
        return None
    source, num_updates = found
    shutil.copyfile(last, last + UNREADABLE_SUFFIX)
    tmp = last + ".tmp"
    shutil.copyfile(source, tmp)
    os.replace(tmp, last)
    logger.warning(
        "%s does not load (truncated or not a torch checkpoint, e.g. a crash while fairseq copied it; kept as "
        "%s): resuming from %s (%d updates), the newest checkpoint that loads",
        last,
        os.path.basename(last + UNREADABLE_SUFFIX),
        source,
        num_updates,
    )
    return source
