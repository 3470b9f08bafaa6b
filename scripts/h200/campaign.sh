#!/usr/bin/env bash
# The H200 batch campaign as a user types it on a GPU box (perflib installed, or this checkout on
# PYTHONPATH): build llama-server with CUDA, build the CUPTI injection library, run the campaign.
# Everything else (starting each arm's server, injecting CUPTI, keeping its records apart from the
# log, waiting for health, cutting the capture into the runs, the page) is the campaign's.
set -eu
PERFLIB=${PERFLIB:-python3 -m perflib}
$PERFLIB server build --backend cuda --gpu-arch 90 -j "$(nproc)"
$PERFLIB server cupti
$PERFLIB campaign run campaigns/${CAMPAIGN:-cuda-h200-batch}.yaml --guard --guard-idle-s "${GUARD_IDLE_S:-10}" ${CAMPAIGN_ARGS:-}
