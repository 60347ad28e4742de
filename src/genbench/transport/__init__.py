"""The transport: one HTTP/1.1 client for every request genbench sends, and each
response parsed into a record (the thinking split out of `content` included)."""
