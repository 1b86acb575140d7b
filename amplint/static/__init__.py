"""The static analysis: parsing a file once into a `FileContext`, its scopes and dataflow, the
patterns rules share, and the dtype-facts engine that says what dtype each expression can have.

It imports nothing from the rest of amplint but the line helpers of `amplint.source`; rules, the
pipeline and fixing import it.
"""
