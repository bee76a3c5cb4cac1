"""Components of the project-layout test topology (a streamparse ``src/``)."""
