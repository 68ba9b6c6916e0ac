"""The HTTP/2 client session, by the name its users import it under.

It lives with the rest of our HTTP/2 implementation, in :mod:`nvpair_wm.proto.h2.client`
(frames, HPACK and SETTINGS are shared with the server there); this module keeps the import
path of :mod:`nvpair_wm.io.client`, the benchmarks and the tests stable.
"""

from nvpair_wm.proto.h2.client import H2ClientSession

__all__ = ["H2ClientSession"]
