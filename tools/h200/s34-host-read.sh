# Issue 28, fourteenth round, first machine: what the host's per-step token read and
# offsets upload cost the B=256 step (host_read_probe.py, paired variants in one
# process), and the embedding gather and argmax timed alone (embed_probe.py). ~6 minutes.
# Run as: source .gpu-stage/bundle/q4/install.sh && bash tools/h200/s34-host-read.sh
set -u
R=$OUT/e TAG=e
source tools/h200/bench-lib.sh
timeout 90 python3 tools/h200/embed_probe.py --batch 256 > $R/embed.log 2>&1
echo "== embed: exit $?"; cat $R/embed.log; pack
timeout 240 python3 tools/h200/host_read_probe.py --model llama-3.1-8b --batch 256 --rounds 3 \
  > $R/host-8b.log 2>&1
echo "== host 8b: exit $?"; tail -5 $R/host-8b.log; pack
timeout 120 python3 tools/h200/host_read_probe.py --model llama-3.2-1b --batch 256 --rounds 3 \
  --variants as-is,no-read,read-copy > $R/host-1b.log 2>&1
echo "== host 1b: exit $?"; tail -3 $R/host-1b.log; pack
