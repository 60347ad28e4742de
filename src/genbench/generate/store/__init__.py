"""The one owner of a `genbench generate` output directory: its layout (every path), the
crash-safe files (append, index, lock) on `genbench.atomic`, the writer, the read-back and
the resume (what a rerun finds: repairs, settings compared, changed input)."""
