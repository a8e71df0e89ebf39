#!/usr/bin/env bash
# The default model's GPU recipe (train/defaults.py: EVERYDAY_GPU), run on a GPU machine that reaches no
# network. Three steps (README, "Models"):
#   here:   python -m transformer_core.train.corpus_pack --out .corpora --only everyday-gpt   (8.6 MB, ignored by git)
#   there:  bash scripts/train_on_device.sh "$OUT"        (the device call carries .corpora; about 7 minutes)
#   (a trial on a CPU: bash scripts/train_on_device.sh /tmp/out --budget 150 --device cpu; a trial on the GPU takes
#    build.TRIAL_OPTIONS, e.g. --steps 20000 --budget 420 --d-model 512, which its card's command then names)
#   here:   tar xzf FILES_AT/everyday-gpt.tgz -C assets/models && python bench/everyday.py
# The build writes the model folder (weights, config, card with its figures, held-out samples, neuron index); it is
# sent back as one archive with the build's log.
set -euo pipefail
out=${1:?usage: bash scripts/train_on_device.sh OUT_FOLDER [build options, e.g. --budget 240]}
shift
export PYTHONUNBUFFERED=1
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
work=$(mktemp -d)
python3 -m transformer_core.train.build --only everyday-gpt --recipe gpu --cache .corpora --out "$work" "$@" 2>&1 \
  | tee "$out/build.log"
tar czf "$out/everyday-gpt.tgz" -C "$work" everyday-gpt
ls -la "$out"
