"""A deterministic HTML page of a given size for the compression scenario (C1).

The nginx welcome page of seed 001 (S5's index.html) repeated would compress to almost nothing:
every copy after the first is one back-reference, which measures no encoder. So the page keeps
that head and style and fills its body with what a real page has: a navigation list, articles
of varied prose, tables of figures and links, drawn from a fixed vocabulary by a seeded
generator. gzip and brotli at level 6 take it to a little under a third of its size, as they
do a text-heavy page, and it is the same bytes on every run and machine.
"""

HEAD = (
    "<!DOCTYPE html>\n<html>\n<head>\n<title>Welcome to nginx!</title>\n<style>\n"
    "    body {\n        width: 35em;\n        margin: 0 auto;\n"
    "        font-family: Tahoma, Verdana, Arial, sans-serif;\n    }\n</style>\n"
    "</head>\n<body>\n<h1>Welcome to nginx!</h1>\n"
    "<p>If you see this page, the nginx web server is successfully installed and\n"
    "working. Further configuration is required.</p>\n\n"
    "<p>For online documentation and support please refer to\n"
    '<a href="http://nginx.org/">nginx.org</a>.<br/>\n'
    "Commercial support is available at\n"
    '<a href="http://nginx.com/">nginx.com</a>.</p>\n\n'
    "<p><em>Thank you for using nginx.</em></p>\n"
)
TAIL = "</body>\n</html>\n"

WORDS = (
    "the of and to in is that for it as with was on be by at this are from or have an they "
    "which one you were all we when there can been has more if will their who about would "
    "what so out up into time only other new some could these two may then first any like "
    "server request response header stream window frame client proxy cache upstream socket "
    "buffer connection latency throughput encoder decoder quality level brotli gzip deflate "
    "window table entropy huffman literal distance match block chunk record handshake cipher "
    "certificate session ticket resumption priority weight dependency settings ping goaway "
    "river mountain garden window kitchen bicycle harbour lantern meadow orchard pebble "
    "quarry saddle thimble valley willow yarrow zephyr amber bronze copper cobalt crimson "
    "indigo ivory jade olive scarlet silver umber violet morning evening winter summer spring "
    "autumn north south east west quickly slowly carefully quietly loudly rarely often never "
    "always perhaps however therefore meanwhile although because unless until whereas "
    "measure compare record report publish review update release install configure deploy "
    "monitor observe explain describe improve reduce increase balance schedule retry "
    "library document chapter section paragraph sentence figure column index appendix"
).split()

SECTION_TITLES = (
    "Release notes",
    "Getting started",
    "Configuration reference",
    "Performance tuning",
    "Frequently asked questions",
    "Security advisories",
    "Community news",
    "Changelog",
)


class Rng:
    """xorshift32: deterministic, fast enough, and the same in every Python."""

    def __init__(self, seed):
        self.x = seed & 0xFFFFFFFF or 1

    def next(self):
        x = self.x
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        self.x = x
        return x

    def below(self, n):
        return self.next() % n

    def word(self):
        return WORDS[self.below(len(WORDS))]


def html_page(size, seed=20240609):
    """Exactly `size` bytes of HTML (ASCII): the welcome page's head, then varied sections."""
    rng = Rng(seed)
    budget = size - len(HEAD) - len(TAIL)
    if budget < 0:
        raise ValueError("a page needs at least %d bytes" % (len(HEAD) + len(TAIL)))
    parts = [_nav(rng)]
    used = len(parts[0])
    if used > budget:
        parts, used = [], 0
    n = 0
    while True:
        piece = _section(rng, n)
        if used + len(piece) > budget:
            break
        parts.append(piece)
        used += len(piece)
        n += 1
    parts.append(_filler(rng, budget - used))
    page = HEAD + "".join(parts) + TAIL
    return page.encode("ascii")


def _nav(rng):
    items = "".join(
        '<li><a href="/%s/%s.html">%s</a></li>\n'
        % (rng.word(), rng.word(), " ".join(rng.word() for _ in range(1 + rng.below(3))))
        for _ in range(12)
    )
    return '<ul class="nav">\n%s</ul>\n' % items


def _sentence(rng):
    words = [rng.word() for _ in range(6 + rng.below(14))]
    words[0] = words[0].capitalize()
    return " ".join(words) + ".!?."[rng.below(4)]


def _section(rng, n):
    title = SECTION_TITLES[rng.below(len(SECTION_TITLES))]
    out = ['<div class="section" id="s%d">\n<h2>%s %d</h2>\n' % (n, title, n + 1)]
    for _ in range(2 + rng.below(3)):
        out.append("<p>%s</p>\n" % " ".join(_sentence(rng) for _ in range(2 + rng.below(4))))
    if rng.below(2):
        rows = "".join(
            '<tr><td><a href="/%s/%d">%s %s</a></td><td>%d</td><td>%d.%02d%%</td></tr>\n'
            % (
                rng.word(),
                rng.below(100000),
                rng.word(),
                rng.word(),
                rng.below(1000000),
                rng.below(100),
                rng.below(100),
            )
            for _ in range(3 + rng.below(6))
        )
        header = "<tr><th>name</th><th>count</th><th>share</th></tr>\n"
        out.append("<table>\n%s%s</table>\n" % (header, rows))
    out.append("</div>\n")
    return "".join(out)


def _filler(rng, room):
    """A last paragraph of exactly `room` bytes (newlines when a paragraph does not fit)."""
    shell = "<p></p>\n"
    if room < len(shell) + 1:
        return "\n" * room
    text = ""
    while len(text) < room - len(shell):
        text += _sentence(rng) + " "
    return "<p>%s</p>\n" % text[: room - len(shell)]
