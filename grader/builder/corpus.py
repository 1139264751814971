"""An offline training corpus: the English documentation of the Python standard library.

Every Python installation carries a few MB of real prose in its docstrings and in pydoc's topics
(the language reference's text), so a model can be trained with no network at all. The corpus
is built deterministically (a fixed list of modules, walked in sorted order), tokenised with
GPT-2's tokenizer, and cut into fixed batches:

    corpus = build(tokenizer)                        # or load(): cached, with the offline tokenizer
    train = corpus.train_batches(n_batches=100, batch_size=8, posn=64, seed=0)

Token ids are renumbered by frequency (`Corpus.gpt2_ids` maps them back), so that a tiny model's
vocabulary is the few thousand tokens the corpus uses rather than GPT-2's 50257. `from_texts`
builds the same from any texts, TinyStories for instance. Tokenisation happens where a tokenizer
may be imported (the reference builder, a notebook): never in the learner's process.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import pkgutil
import sys
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    import torch

# Modules safe to import anywhere (nothing opens a window, prints or needs a platform), and the
# packages among them whose submodules are walked too.
MODULES = (
    "abc",
    "argparse",
    "ast",
    "asyncio",
    "base64",
    "bisect",
    "builtins",
    "bz2",
    "calendar",
    "cmd",
    "codecs",
    "collections",
    "concurrent",
    "configparser",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email",
    "enum",
    "filecmp",
    "fnmatch",
    "fractions",
    "ftplib",
    "functools",
    "getopt",
    "gettext",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http",
    "imaplib",
    "importlib",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "logging",
    "lzma",
    "mailbox",
    "math",
    "mimetypes",
    "multiprocessing",
    "numbers",
    "operator",
    "optparse",
    "os",
    "pathlib",
    "pickle",
    "pkgutil",
    "platform",
    "plistlib",
    "poplib",
    "pprint",
    "pydoc",
    "queue",
    "random",
    "re",
    "sched",
    "secrets",
    "selectors",
    "shelve",
    "shlex",
    "shutil",
    "smtplib",
    "socket",
    "socketserver",
    "sqlite3",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "timeit",
    "tokenize",
    "traceback",
    "types",
    "typing",
    "unittest",
    "urllib",
    "uuid",
    "warnings",
    "weakref",
    "wsgiref",
    "xml",
    "xmlrpc",
    "zipfile",
    "zoneinfo",
)
SKIPPED_PARTS = ("__main__", "test", "tests")  # submodules that run something or hold tests
MIN_CHARACTERS = 80  # shorter docstrings are mostly signatures ("Return self+value.")
RARE, RARE_TEXT = -1, "\ufffd"  # what `Corpus.capped` makes of the tokens it leaves out
HELD_OUT_EVERY = 10  # every tenth document is held out, so held-out text is never trained on


def import_quietly(name: str):
    """The module, or None where this installation lacks it; nothing it prints or warns is shown."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            return importlib.import_module(name)
        except Exception:  # an optional module this build of Python does not have
            return None


def modules() -> Iterator:
    """MODULES and their submodules, in sorted order."""
    for name in sorted(MODULES):
        module = import_quietly(name)
        if module is None:
            continue
        yield module
        for info in sorted(pkgutil.walk_packages(getattr(module, "__path__", []), f"{name}."), key=lambda i: i.name):
            parts = info.name.split(".")[1:]
            if any(part.startswith("_") or part in SKIPPED_PARTS for part in parts):
                continue
            submodule = import_quietly(info.name)
            if submodule is not None:
                yield submodule


def defined_in(obj, module) -> bool:
    """Whether `obj` comes from `module` itself, not from an import or another library's patch."""
    function = obj.fget if isinstance(obj, property) else obj
    return getattr(function, "__module__", None) in (module.__name__, None)  # None: a C method


def members(module) -> Iterator:
    """The module, then the public classes and functions it defines (sorted by name), each class
    followed by the public methods defined in its own body."""
    yield module
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue  # private, or imported from elsewhere and documented there
        if inspect.isclass(obj):
            yield obj
            for attribute_name, attribute in sorted(vars(obj).items()):
                if isinstance(attribute, (classmethod, staticmethod)):
                    attribute = attribute.__func__
                routine = inspect.isroutine(attribute) or isinstance(attribute, property)
                if routine and not attribute_name.startswith("_") and defined_in(attribute, module):
                    yield attribute
        elif inspect.isroutine(obj):
            yield obj


def documents() -> list[str]:
    """Every distinct docstring of the corpus's modules of MIN_CHARACTERS or more, then pydoc's topics."""
    from pydoc_data.topics import topics

    seen: set[str] = set()
    found = []
    imported = list(modules())  # all first: importing a module can add members to one imported before
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated modules (typing.io) warn when their docstring is read
        texts = [inspect.getdoc(obj) for module in imported for obj in members(module)]
    for text in [*texts, *(topics[key] for key in sorted(topics))]:
        if text and len(text) >= MIN_CHARACTERS and text not in seen:
            seen.add(text)
            found.append(text.strip())
    return found


@dataclass
class Corpus:
    """Two token streams in the corpus's own ids (0 the most frequent token), and the GPT-2 id of each."""

    train: torch.Tensor  # (n_train,) int64
    held_out: torch.Tensor  # (n_held_out,) int64
    gpt2_ids: torch.Tensor  # (d_vocab,) int64: gpt2_ids[i] is GPT-2's id of the corpus's token i

    @property
    def d_vocab(self) -> int:
        return len(self.gpt2_ids)

    def capped(self, d_vocab: int) -> Corpus:
        """The same text with its d_vocab - 1 most frequent tokens, every rarer one as id d_vocab - 1
        (GPT-2 id RARE): a small vocabulary keeps a tiny model's unembedding, its largest cost, small."""
        import torch

        rare = torch.tensor([RARE])
        return Corpus(
            self.train.clamp(max=d_vocab - 1),
            self.held_out.clamp(max=d_vocab - 1),
            torch.cat([self.gpt2_ids[: d_vocab - 1], rare]),
        )

    def train_batches(self, n_batches: int, batch_size: int, posn: int, seed: int) -> torch.Tensor:
        """(n_batches, batch_size, posn) windows of the training stream at seeded random offsets."""
        import torch

        generator = torch.Generator().manual_seed(seed)
        starts = torch.randint(0, len(self.train) - posn + 1, (n_batches, batch_size), generator=generator)
        return self.train[starts[..., None] + torch.arange(posn)]

    def held_out_batches(self, n_batches: int, batch_size: int, posn: int) -> torch.Tensor:
        """(n_batches, batch_size, posn) windows side by side from the start of the held-out stream, none
        overlapping."""
        needed = n_batches * batch_size * posn
        if len(self.held_out) < needed:
            raise ValueError(f"the held-out stream has {len(self.held_out)} tokens, {needed} are needed")
        return self.held_out[:needed].reshape(n_batches, batch_size, posn)

    def decode(self, ids: torch.Tensor, tokenizer) -> str:
        """The text of corpus ids; a capped corpus's rare tokens read as RARE_TEXT."""
        runs, text = self.gpt2_ids[ids].tolist(), []
        while runs:
            known = next((i for i, token in enumerate(runs) if token == RARE), len(runs))
            text += [tokenizer.decode(runs[:known])] + [RARE_TEXT] * (known < len(runs))
            runs = runs[known + 1 :]
        return "".join(text)


def from_texts(texts: Iterable[str], tokenizer) -> Corpus:
    """Tokenise each text with `tokenizer` (GPT-2's), end it with end-of-text, hold out every
    HELD_OUT_EVERY-th, and renumber the ids by frequency over the whole corpus."""
    import torch

    texts = list(texts)
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]  # no BOS: documents end with end-of-text
    eos = tokenizer.eos_token_id
    streams: tuple[list[int], list[int]] = ([], [])
    for i, ids in enumerate(encoded):
        streams[i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1].extend([*ids, eos])
    train, held_out = (torch.tensor(stream, dtype=torch.int64) for stream in streams)
    gpt2_ids, counts = torch.cat([train, held_out]).unique(return_counts=True)
    # By falling count, ties by GPT-2 id: a stable order, so the same texts give the same ids.
    order = sorted(range(len(gpt2_ids)), key=lambda i: (-int(counts[i]), int(gpt2_ids[i])))
    gpt2_ids = gpt2_ids[order]
    compact = torch.empty(int(gpt2_ids.max()) + 1, dtype=torch.int64)
    compact[gpt2_ids] = torch.arange(len(gpt2_ids))
    return Corpus(compact[train], compact[held_out], gpt2_ids)


def build(tokenizer) -> Corpus:
    """The standard library's documentation as a Corpus, tokenised with `tokenizer`."""
    return from_texts(documents(), tokenizer)


def load(tokenizer=None) -> Corpus:
    """`build` with the offline GPT-2 tokenizer (or `tokenizer`), cached in the grader's cache per
    Python version, for a notebook or a script (the grader's own checks build it in the reference).
    A cache file that cannot be read is built again; a cache that cannot be written costs the next
    run the build (3 s), never this one."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file, save

    from grader.shared.paths import cache_root, write_replacing

    path = cache_root() / f"corpus-stdlib-{sys.version_info.major}.{sys.version_info.minor}.safetensors"
    if tokenizer is None:
        with contextlib.suppress(OSError, SafetensorError, TypeError):  # TypeError: not the three tensors
            return Corpus(**load_file(str(path)))
        from grader.builder.tokenizer import offline_tokenizer

        tokenizer = offline_tokenizer()
    corpus = build(tokenizer)
    with contextlib.suppress(OSError):  # another process may be reading path: replaced in one rename
        path.parent.mkdir(parents=True, exist_ok=True)
        write_replacing(path, save({"train": corpus.train, "held_out": corpus.held_out, "gpt2_ids": corpus.gpt2_ids}))
    return corpus
