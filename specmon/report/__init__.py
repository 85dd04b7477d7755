"""`specmon report`: tables and plots from finished session folders.

data.py reads folders back through specmon.session.recorded.load_session (one CSV parser in the
project), frontier.py compares arms at matched interactivity, knees.py gathers every knee
definition, compare.py handles repeat runs and drafter comparisons, tables.py turns all of it into
format-neutral tables that markdown.py, html.py (and plots.py, for figures) render.
Nothing here imports Textual.
"""
