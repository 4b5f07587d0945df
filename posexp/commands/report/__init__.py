"""`posexp report`: jobs (what a run dir holds), view (the section registry and Markdown
helpers), views/ (one section per kind of experiment), write (the command itself)."""
