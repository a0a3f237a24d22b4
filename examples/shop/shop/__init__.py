"""A small shop service: orders over HTTP, confirmation mails and cart expiry in the background."""
