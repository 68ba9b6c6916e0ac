"""Command line (+ ``--config FILE``) → :class:`~nvpair_wm.config.Config`, checked; then run.

Flags override the file, the file overrides the defaults. A flag's ``dest`` is the dotted
config key it sets, so every flag is applied the same way. Any value that cannot work (a bad
flag, a bad file, an address that is not this host's, a directory that is not there, a cluster
root given for a node's folder, a cluster directory another node holds) is one line on stderr
and exit status 2, naming the flag (or the file and key) to fix. ``--print-config`` checks only
the form of values, so that a file for another host can be previewed. The console script is
``entry.py``, which handles stop signals before this module is imported.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import ipaddress
import logging
import os
import re
import socket
import stat
import sys
from collections.abc import Callable
from pathlib import Path

from nvpair_wm_schema.contract import DEFAULT_PORT

from nvpair_wm import __version__, allocator, config, dirlock, logs, platforms
from nvpair_wm.cmdline import OneLineParser
from nvpair_wm.config import Config, ConfigError
from nvpair_wm.dirlock import ClusterDirLock
from nvpair_wm.errors import ClusterDirInUse, ConfigInvalid
from nvpair_wm.journal import JournalFormatError
from nvpair_wm.node import Node
from nvpair_wm.pins import CERT_FILE, KEY_FILE, TRUSTED_DIR
from nvpair_wm.versions import CONTRACT_VERSION

#: Longest Unix socket path (sun_path is 108 bytes on Linux, NUL included).
_MAX_UNIX_PATH = 107
_NUMERIC = re.compile(r"[0-9.]+|.*:.*")


def int_in(lo: int, hi: int | None = None, what: str = "a whole number") -> Callable[[str], int]:
    """An argparse type: a decimal integer within [lo, hi] (no upper bound when hi is None)."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            bound = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
            raise argparse.ArgumentTypeError(f"must be {bound}: {value}")
        return value

    return parse


def metrics_address(text: str) -> str:
    """An argparse type for --metrics: checked here, kept as text (the config's form)."""
    try:
        config.metrics_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="nvpair-wm",
        description="Relays and deduplicates inference-workload lifecycle events between this "
        "node's broker (stdio or --ipc) and the cluster's other nodes (mutual-TLS HTTP).",
        epilog="SIGHUP reads --config again and applies what can change live. "
        "'nvpair-wm status --help': ask a running node for its peers, journal and counters.",
    )
    # Every flag but --config/--print-config has dest = the config key it sets, default None
    # (not given): see main().
    p.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="TOML file setting any limit or tunable (docs/configuration.md); flags override it",
    )
    p.add_argument(
        "--port",
        type=int_in(0, 65535, "a port number"),
        metavar="N",
        help=f"inter-node port to listen on and advertise (default {DEFAULT_PORT}; 0 picks a "
        "free port, reported in the log and in manager:status)",
    )
    p.add_argument(
        "--ipc",
        metavar="PATH",
        help="broker endpoint to dial: a Unix socket (or a Windows named pipe) instead of "
        "stdio; dialing is retried for broker.dial_timeout (10 s)",
    )
    p.add_argument(
        "--cluster-dir",
        type=Path,
        metavar="PATH",
        help="cluster config dir: node.crt, node.key and trusted/*.crt; without it "
        "the node has no cluster identity and exchanges no inter-node traffic",
    )
    p.add_argument(
        "--bind",
        metavar="ADDR",
        help="listen on this address only (default: every interface, IPv4 and IPv6)",
    )
    p.add_argument(
        "--broker-queue",
        dest="broker.queue_frames",
        type=int_in(1),
        metavar="N",
        help="frames that may wait for the broker before peers get 503 and the broker's own "
        "input is paused (default 10000)",
    )
    p.add_argument(
        "--log-level",
        choices=list(logs.LEVELS),
        help="error, warn, info (default) or debug; logs go to stderr",
    )
    p.add_argument(
        "--log-format",
        choices=list(logs.FORMATS),
        help="auto (default: rich on a terminal, plain lines otherwise), plain, or json (one "
        "object per line: time, level, logger, message and structured fields)",
    )
    p.add_argument(
        "--metrics",
        type=metrics_address,
        metavar="ADDR:PORT",
        help="serve Prometheus metrics over plain HTTP at http://ADDR:PORT/metrics (ADDR "
        "defaults to 127.0.0.1 when only :PORT or PORT is given; port 0 picks a free one, "
        "reported in the log); off by default",
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the configuration these flags and --config give, as TOML, and exit",
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"nvpair-wm {__version__} (contract {CONTRACT_VERSION})",
        help="print the package version and the contract version it speaks, and exit",
    )
    return p


def raise_fd_limit() -> None:
    """The descriptor limit as high as it goes (POSIX; Windows has none for sockets): every
    connection is a descriptor (:func:`nvpair_wm.platforms.raise_descriptor_limit`)."""
    if (why := platforms.raise_descriptor_limit()) is not None:
        logging.getLogger(__name__).warning("%s", why)


# -- checks of values that parse but cannot work ------------------------------------------------


def bind_form_problem(addr: str) -> str | None:
    """Why ``addr`` is no address on any host (numeric but malformed), or None."""
    try:
        ipaddress.ip_address(addr)
    except ValueError:
        if _NUMERIC.fullmatch(addr):
            return "not a valid IPv4 or IPv6 address"
    return None


def bind_problem(addr: str) -> str | None:
    """Why ``addr`` cannot be listened on (not an address, or not one of this host's), or None."""
    if why := bind_form_problem(addr):
        return why
    try:
        infos = socket.getaddrinfo(addr, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        return f"not an address or a host name this host resolves ({exc.args[-1]})"
    problem = "no address"
    for family, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.bind(sockaddr)  # port 0: checks the address, takes no port
            return None
        except OSError as exc:
            problem = exc.strerror or str(exc)
    return f"not an address of this host ({problem})"


def node_folders(path: Path) -> list[str]:
    """The node folders (each holding a ``node.crt``) in ``path`` when ``path`` itself holds
    none: ``path`` is then the root ``nvpair-wm-cluster init`` made, not one node's folder."""

    def holds_a_certificate(folder: Path) -> bool:
        try:
            return stat.S_ISREG(os.stat(folder / CERT_FILE).st_mode)
        except OSError:
            return False

    if holds_a_certificate(path) or (path / KEY_FILE).exists():
        return []
    try:
        with os.scandir(path) as scan:
            entries = sorted(scan, key=lambda e: e.name)
    except OSError:
        return []
    return [e.name for e in entries if holds_a_certificate(Path(e.path))]


def cluster_dir_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a cluster directory, or None. A missing identity inside an
    existing directory is not a problem here (the node warns and runs without one)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "no such directory (create one with nvpair-wm-cluster init)"
    except OSError as exc:
        return f"cannot stat it: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    for where in (path, path / TRUSTED_DIR):
        try:
            with os.scandir(where):
                pass
        except FileNotFoundError:
            continue  # no trusted/ yet: nothing pinned (as designed)
        except NotADirectoryError:
            return f"{where} is not a directory"
        except OSError as exc:
            return f"cannot read {where}: {exc.strerror}"
    if nodes := node_folders(path):
        return (
            f"a cluster root holding the node folders {', '.join(nodes)}; give this node's "
            f"folder, e.g. --cluster-dir {path / nodes[0]}"
        )
    return None


def ipc_problem(path: str) -> str | None:
    """Why ``path`` can never be a broker socket to dial, or None."""
    if platforms.WINDOWS:  # named pipes have no directory; asyncio dials no Unix socket there
        if platforms.is_named_pipe(path):
            return None
        return "not a named pipe (\\\\.\\pipe\\NAME): the only --ipc endpoint on Windows"
    if platforms.is_named_pipe(path):
        return "a Windows named pipe: on this system --ipc dials a Unix socket"
    if len(os.fsencode(path)) > _MAX_UNIX_PATH:
        return f"longer than a Unix socket path may be ({_MAX_UNIX_PATH} bytes)"
    parent = Path(path).parent
    if not parent.is_dir():
        return f"directory {parent} does not exist"
    if Path(path).is_dir():
        return "is a directory, not a socket"
    return None


def _problems(cfg: Config, *, on_this_host: bool) -> list[tuple[str, str]]:
    """(config key, what is wrong) for each value that parsed but cannot work. Without
    ``on_this_host`` (``--print-config``: the file may be for another host) only the form of a
    value is checked, not whether this host has that address, directory or socket."""
    out: list[tuple[str, str]] = []
    address_problem = bind_problem if on_this_host else bind_form_problem
    if cfg.bind is not None and (why := address_problem(cfg.bind)):
        out.append(("bind", why))
    if cfg.metrics is not None:
        try:
            host, _ = config.metrics_address(cfg.metrics)
        except ValueError as exc:
            out.append(("metrics", str(exc)))
        else:
            if why := address_problem(host):
                out.append(("metrics", why))
    if not on_this_host:
        return out
    if cfg.cluster_dir is not None and (why := cluster_dir_problem(cfg.cluster_dir)):
        out.append(("cluster_dir", why))
    if cfg.ipc is not None and (why := ipc_problem(cfg.ipc)):
        out.append(("ipc", why))
    return out


# -- main -----------------------------------------------------------------------------------------


def build_config(
    p: argparse.ArgumentParser, args: argparse.Namespace, *, on_this_host: bool = True
) -> Config:
    """Flags over ``--config`` over defaults, checked; :class:`ConfigInvalid` with one line
    naming what to fix. The same checks at start and on a reload (SIGHUP), which calls this
    again with the command line of the start."""
    flags = {a.dest: a.option_strings[0] for a in p._actions if a.option_strings}
    names = config.key_names()
    given = {k: v for k, v in vars(args).items() if k in names and v is not None}

    def where(key: str) -> str:
        if key in given:
            return f"{flags[key]} {given[key]}"
        return f"--config {args.config}: {key}"

    cfg = Config()
    if args.config is not None:
        try:
            cfg = config.load(args.config)
        except ConfigError as exc:
            raise ConfigInvalid(f"--config {args.config}: {exc}") from None
    try:
        cfg = config.replace(cfg, given)
    except ConfigError as exc:
        raise ConfigInvalid(
            f"{where(exc.key)}: {exc.reason}"
            if exc.key in given
            else f"--config {args.config}: {exc}"
            if args.config is not None
            else str(exc)
        ) from None
    for key, why in _problems(cfg, on_this_host=on_this_host):
        raise ConfigInvalid(f"{where(key)}: {why}")
    return cfg


def configure(p: argparse.ArgumentParser, argv: list[str] | None) -> tuple[Config, bool]:
    """Flags over ``--config`` over defaults; exits 2 with one line naming what to fix."""
    args = p.parse_args(argv)
    try:
        cfg = build_config(p, args, on_this_host=not args.print_config)
    except ConfigInvalid as exc:
        p.error(str(exc))
    return cfg, bool(args.print_config)


def rereader(p: argparse.ArgumentParser, argv: list[str] | None) -> Callable[[], Config] | None:
    """What a reload calls: the ``--config`` file read again under the same flags, checked as
    at start (raises :class:`ConfigInvalid`); None without ``--config``."""
    args = p.parse_args(argv)
    if args.config is None:
        return None
    return functools.partial(build_config, p, args)


def lock_cluster_dir(p: argparse.ArgumentParser, cfg: Config) -> ClusterDirLock | None:
    """One daemon per cluster directory (dirlock.py): exit 2 naming the lock and its holder."""
    if cfg.cluster_dir is None:
        return None
    try:
        return dirlock.acquire(cfg.cluster_dir)
    except ClusterDirInUse as exc:
        holder = f"process {exc.pid}" if exc.pid is not None else "another process"
        p.error(
            f"--cluster-dir {cfg.cluster_dir}: in use by {holder} (it holds the lock "
            f"{exc.path}); stop it, or give another node's folder"
        )
    except OSError as exc:
        p.error(
            f"--cluster-dir {cfg.cluster_dir}: cannot create its lock "
            f"{cfg.cluster_dir / dirlock.LOCK_FILE}: {exc.strerror or exc} (the node needs to "
            "write its cluster directory)"
        )


def main(argv: list[str] | None = None) -> int:
    """Configure, check, lock and run the node; its exit status (entry.py exits with it)."""
    p = parser()
    cfg, print_only = configure(p, argv)
    if print_only:
        sys.stdout.write(config.dumps(cfg))
        return 0
    logs.configure(cfg.log_level, cfg.log_format)
    lock = lock_cluster_dir(p, cfg)
    allocator.pin_mmap_threshold()
    raise_fd_limit()
    try:
        code = asyncio.run(Node(cfg, reread=rereader(p, argv)).run())
    except JournalFormatError as exc:  # a newer release's journal: kept as it is, not read
        logging.getLogger("nvpair_wm").error("%s; exiting with status 2", exc)
        code = 2
    except KeyboardInterrupt:  # pragma: no cover - SIGINT is handled inside run()
        code = 130
    except Exception as exc:  # a bug outside the watched tasks: one line, and a non-zero status
        logging.getLogger("nvpair_wm").debug("fatal error", exc_info=True)
        why = " ".join(f"{type(exc).__name__}: {exc}".split())
        logging.getLogger("nvpair_wm").error("fatal: %s; exiting with status 1", why)
        code = 1
    if lock is not None:
        lock.release()
    return code
