"""The layers of the dtype-facts engine, lowest first: `state` (the file's definitions, call
sites and parameters), `attributes` (`self` attributes), `interpret` (statements and
expressions), `calls` (what a call returns). `amplint.static.dtypes` puts the questions rules ask
on top. Each layer names the methods of the layers above it that it calls as abstract methods."""
