"""The question: question (the checked inputs of a training run, Setup, and resolve()), modelspec
(what a model is: a size, a preset, a config.json or a shape), presets (the shipped models),
hf_config (a Hugging Face config.json to an architecture) and knobs (the layout knobs and
framework settings, declared once)."""
