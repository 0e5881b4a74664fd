# DO NOT EDIT this folder by hand: ashv_generated.py is flatc's output for schemas/ashv.fbs.
# Regenerate with `python -m snippets_shave.schema_codegen`.
