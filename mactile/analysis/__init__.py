"""Studies built on the golden models (error analyses, dialect statistics)."""
