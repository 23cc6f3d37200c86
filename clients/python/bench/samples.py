"""Realistic cache values shared by the client benchmark and the serializer tests, so the
size targets the tests assert are measured on the very values the benchmark reports."""

from __future__ import annotations

import random
from typing import Any


def user_profile(i: int = 1) -> dict[str, Any]:
    """A ~1 KB nested user profile (pickle: ~1,000 bytes)."""
    rnd = random.Random(i)
    return {
        "id": 100000 + i,
        "username": f"user{i}",
        "email": f"user{i}@example.com",
        "name": {"first": rnd.choice(["Ada", "Alan", "Grace", "Linus"]), "last": rnd.choice(["Lovelace", "Turing"])},
        "active": True,
        "created_at": "2024-03-0%dT12:34:56Z" % rnd.randint(1, 9),
        "roles": ["viewer", "editor"],
        "address": {"street": "%d Main Street" % rnd.randint(1, 999), "city": "Paris", "zip": "75001", "country": "FR"},
        "preferences": {
            "theme": "dark",
            "language": "en",
            "timezone": "Europe/Paris",
            "notifications": {"email": True, "sms": False, "push": True},
        },
        "stats": {
            "logins": rnd.randint(1, 5000),
            "posts": rnd.randint(0, 300),
            "followers": rnd.randint(0, 10000),
            "score": round(rnd.random() * 100, 3),
        },
        "recent_orders": [
            {
                "order_id": 500000 + j,
                "sku": "SKU-%05d" % rnd.randint(0, 99999),
                "qty": rnd.randint(1, 5),
                "price": round(rnd.random() * 200, 2),
                "status": rnd.choice(["shipped", "delivered", "pending"]),
            }
            for j in range(10)
        ],
        "tags": ["beta", "newsletter", "premium"],
    }


def int_list() -> list[int]:
    rnd = random.Random(7)
    return [rnd.randint(0, 1_000_000) for _ in range(1000)]


def html_page() -> str:
    rnd = random.Random(3)
    rows = "\n".join(
        f'    <tr class="row-{i % 2}"><td><a href="/products/{rnd.randint(1, 99999)}">Product {i}</a></td>'
        f"<td>${rnd.randint(1, 500)}.{rnd.randint(0, 99):02d}</td><td>{rnd.choice(['In stock', 'Sold out'])}</td></tr>"
        for i in range(300)
    )
    return (
        "<!doctype html>\n<html><head><title>Catalog</title>"
        '<link rel="stylesheet" href="/static/site.css"></head>\n<body>\n'
        '<nav><ul><li><a href="/">Home</a></li><li><a href="/catalog">Catalog</a></li></ul></nav>\n'
        f"<table>\n{rows}\n</table>\n<footer>&copy; Example</footer></body></html>\n"
    )
