"""Small inline SVG charts and figure tables for admin pages (no JS)."""

from __future__ import annotations

from typing import Any

from django.utils.html import format_html, format_html_join

HIST_BINS = 16


def histogram_svg(
    values: list[int], limit: int, width: int = 320, height: int = 90
) -> str:
    """Bars of token counts from 0 to `limit`, with the limit drawn as a red line."""
    if not values:
        return ""
    top = max(limit, max(values))
    step = max(1, -(-top // HIST_BINS))
    counts = [0] * (top // step + 1)
    for v in values:
        counts[v // step] += 1
    peak = max(counts)
    bar_w = width / len(counts)
    bars = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" fill="#4a7fb5">'
        "<title>{}-{} tokens: {}</title></rect>",
        (
            (
                _f(i * bar_w),
                _f(height - h),
                _f(bar_w - 1),
                _f(h),
                i * step,
                (i + 1) * step - 1,
                c,
            )
            for i, c in enumerate(counts)
            for h in [c / peak * (height - 12)]
        ),
    )
    x_limit = limit / (step * len(counts)) * width
    return format_html(
        '<svg role="img" aria-label="Histogram of chunk token lengths" width="{}" '
        'height="{}" viewBox="0 0 {} {}">'
        '<rect width="100%" height="100%" fill="#fafafa"/>{}'
        '<line x1="{}" x2="{}" y1="0" y2="{}" stroke="#c62828"/>'
        '<text x="{}" y="10" font-size="10" fill="#c62828">window {}</text></svg>',
        width,
        height + 2,
        width,
        height + 2,
        bars,
        _f(x_limit),
        _f(x_limit),
        height,
        _f(max(0, x_limit - 60)),
        limit,
    )


def source_statistics(stats: dict[str, Any]) -> str:
    if not stats:
        return "Not indexed yet."
    rows = [
        ("Sections", stats.get("sections")),
        ("Chunks", stats.get("chunks")),
        ("Median tokens", stats.get("median_tokens")),
        ("p95 tokens", stats.get("p95_tokens")),
        ("Largest chunk", f"{stats.get('max_tokens')} of {stats.get('window')} tokens"),
        ("Word-boundary fallbacks", f"{stats.get('word_fallback_share', 0):.1%}"),
        (
            "Chunks whose embedded heading was shortened",
            stats.get("headings_shortened", 0),
        ),
        ("Last ingestion took", f"{stats.get('duration_s', 0):.2f} s"),
    ]
    if "chunks_reused" in stats:  # kb.embedding_reuse (issue #30)
        rows.insert(
            -1,
            (
                "Chunks embedded / taking stored vectors",
                f"{stats['chunks_embedded']} / {stats['chunks_reused']}",
            ),
        )
    table = format_html_join("", "<tr><th scope='row'>{}</th><td>{}</td></tr>", rows)
    return format_html(
        "<table>{}</table>{}",
        table,
        histogram_svg(stats.get("token_counts", []), stats.get("window", 256)),
    )


def line_chart_svg(points: list[float], width: int = 320, height: int = 80) -> str:
    """A line of values in [0, 1] (e.g. recall@k per run), oldest first."""
    if not points:
        return ""
    n = len(points)
    xs = [i * (width - 10) / max(1, n - 1) + 5 for i in range(n)]
    ys = [height - 5 - p * (height - 10) for p in points]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys))
    dots = format_html_join(
        "",
        '<circle cx="{}" cy="{}" r="3" fill="#4a7fb5"><title>{}</title></circle>',
        ((_f(x), _f(y), f"{p:.3f}") for x, y, p in zip(xs, ys, points)),
    )
    return format_html(
        '<svg role="img" aria-label="Recall over time" width="{}" height="{}">'
        '<polyline fill="none" stroke="#4a7fb5" stroke-width="2" points="{}"/>{}</svg>',
        width,
        height,
        path,
        dots,
    )


def _f(value: float) -> str:
    return f"{value:.1f}"
