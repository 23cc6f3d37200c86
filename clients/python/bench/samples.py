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


def small_profile(i: int = 1) -> dict[str, Any]:
    """A small user record with a 50-int friends list (pickle: ~350 bytes, msgpack ~0.83x that)."""
    rnd = random.Random(i)
    first = rnd.choice(["Ada", "Alan", "Grace", "Linus", "Barbara", "Ken", "Margaret", "Dennis"])
    last = rnd.choice(["Lovelace", "Turing", "Hopper", "Torvalds", "Liskov", "Thompson", "Hamilton", "Ritchie"])
    return {
        "id": 100000 + i,
        "username": f"{first.lower()}{i}",
        "name": f"{first} {last}",
        "email": f"{first.lower()}.{last.lower()}{i}@example.com",
        "active": rnd.random() < 0.9,
        "plan": rnd.choice(["free", "pro", "team"]),
        "country": rnd.choice(["FR", "DE", "US", "GB", "JP"]),
        "created_at": "2024-%02d-%02dT%02d:%02d:00Z"
        % (rnd.randint(1, 12), rnd.randint(1, 28), rnd.randint(0, 23), rnd.randint(0, 59)),
        "last_login": 1_700_000_000 + rnd.randrange(10_000_000),
        "headline": " ".join(
            rnd.choice(["Engineer", "at", "Example", "Corp", "loves", "caching", "and", "coffee"]) for _ in range(6)
        ),
        "friends": [rnd.randrange(256) for _ in range(50)],
    }


def feed_entry(i: int = 1) -> dict[str, Any]:
    """A ~1 KB JSON-like feed entry (msgpack: ~600 bytes)."""
    rnd = random.Random(i)
    words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "cache", "memory", "fleet"]
    return {
        "id": 7000000 + i,
        "type": rnd.choice(["post", "share", "comment"]),
        "author": {
            "id": rnd.randint(1, 10**6),
            "name": "user%d" % rnd.randint(1, 10**6),
            "avatar": "https://cdn.example.com/a/%d.jpg" % rnd.randint(1, 10**6),
        },
        "title": " ".join(rnd.choice(words) for _ in range(8)),
        "body": " ".join(rnd.choice(words) for _ in range(110)),
        "likes": rnd.randint(0, 5000),
        "comments": rnd.randint(0, 300),
        "tags": rnd.sample(["news", "tech", "python", "cache", "db", "web", "ops"], 3),
        "created_at": "2024-05-%02dT%02d:%02d:00Z" % (rnd.randint(1, 28), rnd.randint(0, 23), rnd.randint(0, 59)),
        "visibility": "public",
        "lang": "en",
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
