#!/usr/bin/env bash
# cluster-100k: 100,000 connections spread over several herald nodes sharing channels through
# Redis. A placeholder until the Redis engine exists (a later issue): one node here holds at
# most ~19,000 connections (the 20,000-descriptor limit), so 100k needs the cluster.
# Usage: loadgen/scenarios/cluster-100k.sh
echo "cluster-100k: needs the Redis engine (several herald nodes sharing channels), which is" \
    "not implemented yet; nothing to run. See idle-max.sh for what one node holds."
exit 0
