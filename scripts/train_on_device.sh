#!/usr/bin/env bash
# The default model's GPU recipe (train/defaults.py: EVERYDAY_WORDS_GPU), run on a GPU machine that reaches no
# network and gets the working tree without git's history. Four steps (README, "Building the models"):
#   here:   python -m transformer_core.train.corpus_pack --out .corpora --only everyday-gpt
#           (the cleaned corpora, the word list and the model the recipe starts from: 25 MB, ignored by git)
#   here:   bash scripts/device_tree.sh slim        (the call sends at most 64 MiB: the shipped models stay here)
#   there:  bash scripts/train_on_device.sh "$OUT"   (the call carries .corpora; about 7 minutes)
#   here:   bash scripts/device_tree.sh restore
#           cat FILES_AT/everyday-gpt.tgz.part-* | tar xz -C assets/models && python bench/everyday.py
#   (a trial on a CPU: bash scripts/train_on_device.sh /tmp/out --budget 60 --device cpu, 5 minutes; on the GPU one takes
#    build.TRIAL_OPTIONS, e.g. --steps 20000 --budget 420 --d-model 512, which its card's command then names)
# The build writes the model folder (weights, config, card with its figures, held-out samples, neuron index); it comes
# back as an archive in parts of 15 MiB (a file sent back is at most 16 MiB) beside the build's log.
set -euo pipefail
out=${1:?usage: bash scripts/train_on_device.sh OUT_FOLDER [build options, e.g. --budget 240]}
shift
export PYTHONUNBUFFERED=1
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
work=$(mktemp -d)
python3 -m transformer_core.train.build --only everyday-gpt --recipe gpu --cache .corpora --out "$work" "$@" 2>&1 \
  | tee "$out/build.log"
tar czf - -C "$work" everyday-gpt | split -b 15M -d - "$out/everyday-gpt.tgz.part-"
ls -la "$out"
