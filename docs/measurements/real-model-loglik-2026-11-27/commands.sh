#!/usr/bin/env bash
# Commands of scripts/study_real_model.py, in order.
set -euo pipefail
cd repo-train

# the model
OMP_NUM_THREADS=2 .venv/bin/python -m repo_train real-model --out models/smollm2-135m-instruct

# LPES search
OMP_NUM_THREADS=2 .venv/bin/python -m search run --model.path models/smollm2-135m-instruct --config runs/real-model-loglik/configs/search.yaml --out runs/real-model-loglik/scales/smollm2-mdqa.json --resume

# evaluation
OMP_NUM_THREADS=2 .venv/bin/python -m evaluation run --model models/smollm2-135m-instruct --tasks mdqa --data_dir runs/real-model-loglik/data/eval --num_documents 5 --num_examples 40 --gold_positions all --chat_template true --max_new_tokens 24 --batch_size 8 --device cpu --dtype float32 --no_progress --score gold_loglik --methods baseline --methods caliope:calibrator=hourglass,delta_min=5,delta_max=1000 --methods pi:scale=1.37 --methods ms_poe --methods lpes:scale_file=runs/real-model-loglik/scales/smollm2-mdqa.json --out runs/real-model-loglik/eval/main

# costly methods
OMP_NUM_THREADS=2 .venv/bin/python -m evaluation run --model models/smollm2-135m-instruct --tasks mdqa --data_dir runs/real-model-loglik/data/eval --num_documents 5 --num_examples 8 --gold_positions all --chat_template true --max_new_tokens 24 --batch_size 8 --device cpu --dtype float32 --no_progress --score gold_loglik --methods baseline --methods fim --methods 'attention_buckets:bases=100000|175000|180000|190000|200000|225000' --out runs/real-model-loglik/eval/costly

# the model
OMP_NUM_THREADS=2 .venv/bin/python -m repo_train real-model --out models/smollm2-135m-instruct
