"""A made-up language pair with reordering and agreement, for the quick-start and tests.

Source ("en-like"): subject-verb-object, adjectives before nouns, plural nouns end
in ``-s``, an optional relative clause after the object::

    the big dogs see a small cat that eats the red apple

Target ("xx"): subject-object-verb, adjectives after nouns, every determiner and
adjective agrees with its noun in gender (nouns have a fixed gender) and number,
and the verb agrees with the subject's number; the relative clause is verb-final
as well::

    los dogo grandos una cata pequeña ka la manza roja come ven

So a model must reorder (verb to the end, adjectives after nouns), carry agreement features across several words, and
copy lexical items. Sentences are sampled with a seeded RNG, so the corpus is reproducible.
"""

import argparse
import logging
import os
import random
from typing import List, Sequence, Tuple

from fairseq_dense.logging_setup import add_verbose_flag, configure_logging

logger = logging.getLogger(__name__)

# fmt: off
# source noun -> (target stem, gender)
NOUNS = {
    "dog": ("dog", "m"), "cat": ("cat", "f"), "apple": ("manz", "f"), "house": ("cas", "f"), "boy": ("nin", "m"),
    "girl": ("nin", "f"), "bird": ("pajar", "m"), "book": ("libr", "m"), "tree": ("arbol", "m"),
    "river": ("ri", "m"), "car": ("cot", "m"), "city": ("urb", "f"), "teacher": ("maestr", "m"),
    "doctor": ("medic", "f"), "horse": ("caball", "m"), "table": ("mes", "f"), "window": ("ventan", "f"),
    "friend": ("amig", "m"), "letter": ("cart", "f"), "garden": ("huert", "m"), "song": ("canzon", "f"),
    "fish": ("pesc", "m"), "flower": ("flor", "f"), "king": ("re", "m"), "queen": ("regin", "f"),
}
ADJECTIVES = {
    "big": "grand", "small": "pequeñ", "red": "roj", "old": "viej", "new": "nuev", "happy": "felic",
    "dark": "oscur", "quiet": "tranquil", "green": "verd", "fast": "rapid", "tall": "alt", "cold": "fri",
}
# source verb (3rd person singular, plural) -> target stem
VERBS = {
    ("sees", "see"): "ve", ("eats", "eat"): "com", ("finds", "find"): "encuentr", ("likes", "like"): "quier",
    ("takes", "take"): "tom", ("paints", "paint"): "pint", ("follows", "follow"): "sig",
    ("calls", "call"): "llam", ("reads", "read"): "le", ("visits", "visit"): "visit",
}
# source (definite, plural) -> source word
DETERMINERS = {(True, False): "the", (True, True): "the", (False, False): "a", (False, True): "some"}
TGT_DET = {  # (definite, plural, gender) -> target word
    (True, False, "m"): "lo", (True, False, "f"): "la", (True, True, "m"): "los", (True, True, "f"): "las",
    (False, False, "m"): "uno", (False, False, "f"): "una", (False, True, "m"): "unos", (False, True, "f"): "unas",
}
# fmt: on
#: (gender, plural) -> the ending of a target noun and of its adjectives
SUFFIX = {("m", False): "o", ("f", False): "a", ("m", True): "os", ("f", True): "as"}
VERB_SUFFIX = {False: "e", True: "en"}


def _noun_phrase(rng: random.Random) -> Tuple[List[str], List[str], bool]:
    noun = rng.choice(sorted(NOUNS))
    stem, gender = NOUNS[noun]
    plural = rng.random() < 0.4
    definite = rng.random() < 0.6
    adjs = rng.sample(sorted(ADJECTIVES), k=rng.choice([0, 0, 1, 1, 2]))
    src = [DETERMINERS[(definite, plural)], *adjs, noun + ("s" if plural else "")]
    tgt = [TGT_DET[(definite, plural, gender)], stem + SUFFIX[(gender, plural)]]
    tgt += [ADJECTIVES[a] + SUFFIX[(gender, plural)] for a in adjs]
    return src, tgt, plural


def _verb(rng: random.Random, plural: bool) -> Tuple[str, str]:
    forms = rng.choice(sorted(VERBS))
    return forms[1] if plural else forms[0], VERBS[forms] + VERB_SUFFIX[plural]


def sentence_pair(rng: random.Random, max_depth: int = 2) -> Tuple[str, str]:
    """Sample one (source, target) sentence pair."""
    subj_s, subj_t, subj_pl = _noun_phrase(rng)
    verb_s, verb_t = _verb(rng, subj_pl)
    obj_s, obj_t, obj_pl = _noun_phrase(rng)
    src = subj_s + [verb_s] + obj_s
    clauses: List[str] = []
    clause_verbs: List[str] = []
    depth, head_pl = 0, obj_pl
    while depth < max_depth and rng.random() < 0.35:
        # relative clause on the last noun: "that V NP" -> "ka NP ... V"
        rel_verb_s, rel_verb_t = _verb(rng, head_pl)
        rel_s, rel_t, rel_pl = _noun_phrase(rng)
        src += ["that", rel_verb_s] + rel_s
        clauses += ["ka"] + rel_t
        clause_verbs.insert(0, rel_verb_t)
        depth, head_pl = depth + 1, rel_pl
    # centre embedding: the innermost clause's verb comes first, the main verb last
    tgt = subj_t + obj_t + clauses + clause_verbs + [verb_t]
    return " ".join(src), " ".join(tgt)


def write_corpus(
    out_dir: str, src: str = "en", tgt: str = "xx", sizes: Sequence[int] = (20000, 500, 500), seed: int = 1
) -> str:
    """Write ``{train,valid,test}.{src,tgt}`` raw text to ``out_dir``; the held-out splits leave out
    the sentences of the training split, so BLEU measures generalisation, not memorisation."""
    os.makedirs(out_dir, exist_ok=True)
    rng, seen = random.Random(seed), set()
    splits = dict(zip(("train", "valid", "test"), sizes))
    for split, n in splits.items():
        pairs = []
        while len(pairs) < n:
            pair = sentence_pair(rng)
            if split == "train":
                seen.add(pair[0])
            elif pair[0] in seen:
                continue
            pairs.append(pair)
        for side, lang in ((0, src), (1, tgt)):
            with open(os.path.join(out_dir, f"{split}.{lang}"), "w", encoding="utf-8") as f:
                f.writelines(p[side] + "\n" for p in pairs)
    logger.info("wrote synthetic corpus %s-%s to %s (%s)", src, tgt, out_dir, splits)
    return out_dir


def main(argv=None) -> int:
    """Command-line entry point (``fairseq-dense-synth OUT_DIR``); returns 0, the exit status."""
    parser = argparse.ArgumentParser(prog="fairseq-dense-synth", description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="xx")
    parser.add_argument("--sizes", type=int, nargs=3, default=[20000, 500, 500], metavar=("TRAIN", "VALID", "TEST"))
    parser.add_argument("--seed", type=int, default=1)
    add_verbose_flag(parser)
    args = parser.parse_args(argv)
    configure_logging("%(message)s", verbose=args.verbose)
    write_corpus(args.out_dir, args.src, args.tgt, args.sizes, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
