#!/usr/bin/env bash
# text_apps.sh CASE MLP_TRAIN TRANSFORMER_TRAIN: the text classifiers end to end.
#   learn_mlp, learn_transformer: a few hundred steps on the synthetic set must lift validation
#     accuracy far above chance (4 classes: 25%).
#   aclimdb: both apps on a hand-written aclImdb-layout folder (HTML breaks, unicode, labels
#     from folder names): train, save, --eval-only on the saved model (also from the test split
#     alone: the model names its classes), WordPiece vocab.txt, a resume with another
#     vocabulary or length refused.
#   bad_inputs: each gives one clear message and a non-zero exit.
set -euo pipefail
case_=$1; mlp=$2; tr=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
here=$(cd "$(dirname "$0")" && pwd)

check_metrics() {  # FILE EPOCHS MIN_ACCURACY
  python3 - "$@" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
epochs, floor = int(sys.argv[2]), float(sys.argv[3])
assert len(rows) == epochs, rows
for r in rows:
    for k in ["epoch", "train_loss", "val_loss", "val_accuracy", "seconds", "samples_per_second"]:
        assert k in r, (k, r)
last = rows[-1]
assert last["val_accuracy"] >= floor, f"accuracy {last['val_accuracy']} below {floor}: {rows}"
assert last["train_loss"] < rows[0]["train_loss"], rows
print("metrics ok, last epoch:", last)
PY
}

case $case_ in
learn_mlp)
  # 4 classes x 500 reviews, batch 32: 63 steps an epoch, 252 in all
  "$mlp" --data synthetic --synthetic-classes 4 --synthetic-size 500 --batch-size 32 --epochs 4 \
         --seed 1 --metrics "$out/m.jsonl" --notify-cmd "cat >> '$out/notes.txt'"
  check_metrics "$out/m.jsonl" 4 0.7
  # every epoch's summary reached the notify command, the last one included
  for e in 1 2 3 4; do grep -q "epoch $e/4" "$out/notes.txt" || { echo "no notification for epoch $e"; cat "$out/notes.txt"; exit 1; }; done
  # --metrics into a named pipe: not opened first to try it (that waited for a reader, then
  # ended the reader's input, and the run hung in its next open); the line reaches the reader
  mkfifo "$out/pipe"
  cat "$out/pipe" > "$out/piped.jsonl" &
  reader=$!
  timeout 120 "$mlp" --data synthetic --synthetic-classes 4 --synthetic-size 100 --batch-size 32 \
          --epochs 1 --metrics "$out/pipe" > /dev/null
  wait $reader
  grep -q '"epoch": 1' "$out/piped.jsonl" ;;
learn_transformer)
  "$tr" --data synthetic --synthetic-classes 4 --synthetic-size 500 --batch-size 32 --epochs 4 \
        --layers 1 --hidden 64 --heads 2 --ffn 128 --max-len 96 --seed 1 --metrics "$out/m.jsonl"
  check_metrics "$out/m.jsonl" 4 0.7 ;;
aclimdb)
  d=$out/imdb
  python3 - "$d" <<'PY'
import os, random, sys
root = sys.argv[1]
rng = random.Random(5)
good = ["wonderful", "superb", "moving", "brilliant", "delightful", "masterpiece"]
bad = ["awful", "boring", "dreadful", "tedious", "clumsy", "disaster"]
filler = ["the", "film", "plot", "actors", "scene", "it", "was", "and", "a", "café", "naïve", "story"]
for split, n in [("train", 120), ("test", 40)]:
    for label, words in [("neg", bad), ("pos", good)]:
        os.makedirs(f"{root}/{split}/{label}")
        for i in range(n):
            w = [rng.choice(filler) for _ in range(25)] + [rng.choice(words) for _ in range(5)]
            rng.shuffle(w)
            text = " ".join(w[:15]) + ".<br /><br />" + " ".join(w[15:]) + "!"
            open(f"{root}/{split}/{label}/{i}_{rng.randint(1, 10)}.txt", "w", encoding="utf-8").write(text)
PY
  "$mlp" --data-dir "$d" --epochs 3 --batch-size 16 --metrics "$out/mlp.jsonl" --save-model "$out/mlp.st"
  check_metrics "$out/mlp.jsonl" 3 0.9
  test -s "$out/mlp.st.vocab.txt"
  "$mlp" --data-dir "$d" --eval-only --load-model "$out/mlp.st" | tee "$out/eval.txt"
  grep -Eq "eval on 80 reviews: .*accuracy (9[0-9]|100)" "$out/eval.txt"
  # batch inference: every review's prediction, and three independent jobs (--shard) whose
  # predictions together are the whole set's
  "$mlp" --data-dir "$d" --eval-only --load-model "$out/mlp.st" --predictions "$out/all.jsonl" > /dev/null
  for i in 0 1 2; do
    "$mlp" --data-dir "$d" --eval-only --load-model "$out/mlp.st" --shard $i/3 --predictions "$out/p$i.jsonl" > "$out/s$i.txt"
    grep -q "(shard $i/3)" "$out/s$i.txt"
  done
  python3 - "$d" "$out" <<'PY'
import json, os, sys
d, out = sys.argv[1:]
rows = [json.loads(l) for l in open(f"{out}/all.jsonl")]
assert len(rows) == 80, len(rows)
for r in rows:
    assert os.path.isfile(os.path.join(d, r["source"])), r
    assert r["source"].split("/")[:2] == ["test", r["label"]], r
    assert 0.5 <= r["probability"] <= 1, r  # two classes: the top one has at least half
acc = sum(r["label"] == r["predicted"] for r in rows) / len(rows)
assert acc >= 0.9, acc
parts = {}
for i in range(3):
    for l in open(f"{out}/p{i}.jsonl"):
        r = json.loads(l)
        parts[r["source"]] = r
assert len(parts) == 80, len(parts)
for r in rows:
    p = parts[r["source"]]
    assert p["predicted"] == r["predicted"] and abs(p["probability"] - r["probability"]) < 1e-5, (p, r)
print(f"predictions ok: 80 reviews, accuracy {acc:.3f}; three shards make the whole")
PY
  # more jobs than reviews: a shard with nothing in it says so, and its metrics count 0 samples
  "$mlp" --data-dir "$d" --eval-only --load-model "$out/mlp.st" --shard 85/90 --metrics "$out/empty.jsonl" \
    > "$out/empty.log"  # (a pipe to grep -q could SIGPIPE the app when grep exits early)
  grep -q "eval on 0 reviews (shard 85/90): nothing to evaluate" "$out/empty.log"
  grep -q '"samples": 0' "$out/empty.jsonl"
  # the model carries its class names and length: an inference job needs only the test split
  mkdir -p "$out/testonly"; cp -r "$d/test" "$out/testonly/"
  "$mlp" --data-dir "$out/testonly" --eval-only --load-model "$out/mlp.st" > "$out/testonly.log"
  cmp <(grep -o "loss .*accuracy [0-9.]*%" "$out/testonly.log") <(grep -o "loss .*accuracy [0-9.]*%" "$out/eval.txt")
  # another length than the model's is said
  # (into a file: grep -q on a pipe could end the app by SIGPIPE at its next line)
  "$mlp" --data-dir "$out/testonly" --eval-only --load-model "$out/mlp.st" --max-len 8 > "$out/len8.log"
  grep -q "the model was trained at --max-len 256; this run reads reviews at 8" "$out/len8.log"
  # fine-tuning on classes of other names is said (outputs are matched by position)
  mkdir -p "$out/renamed"; cp -r "$d/train" "$d/test" "$out/renamed/"
  for s in train test; do mv "$out/renamed/$s/neg" "$out/renamed/$s/bad"; mv "$out/renamed/$s/pos" "$out/renamed/$s/good"; done
  "$mlp" --data-dir "$out/renamed" --epochs 1 --batch-size 16 --load-model "$out/mlp.st" > "$out/renamed.log"
  grep -q "the model was trained on the classes (neg, pos); this run trains its outputs, in order, on (bad, good)" "$out/renamed.log"
  # a checkpoint resumed with another vocabulary or length is refused (its embedding rows
  # belong to other words; same shapes)
  "$mlp" --data-dir "$d" --epochs 1 --batch-size 16 --checkpoint-dir "$out/ck" > /dev/null
  "$here/expect.sh" 1 "was trained with other max_len \(256, this run has 64\): resume with the data and flags" -- \
    "$mlp" --data-dir "$d" --epochs 2 --batch-size 16 --checkpoint-dir "$out/ck" --resume --max-len 64
  "$here/expect.sh" 1 "was trained with other vocab \(words [0-9]+ [0-9a-f]+, this run has words [0-9]+ [0-9a-f]+\)" -- \
    "$mlp" --data-dir "$d" --epochs 2 --batch-size 16 --checkpoint-dir "$out/ck" --resume --vocab-size 20
  # and with --relabel where it had none, though the synthetic set's classes have relabel's names
  "$mlp" --data synthetic --synthetic-size 20 --epochs 1 --checkpoint-dir "$out/cks" > /dev/null
  "$here/expect.sh" 1 "was trained with other relabel \(none, this run has 2\)" -- \
    "$mlp" --data synthetic --synthetic-size 20 --epochs 2 --checkpoint-dir "$out/cks" --resume --relabel 2
  # the transformer with a BERT-style WordPiece vocabulary (sub-words, [UNK] for the rest)
  { printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n.\n!\n'; printf '%s\n' the film plot actors scene it was and a story \
      wonder "##ful" super "##b" moving brilliant delight awful boring dread tedious clumsy disaster \
      master "##piece" "##ful"; } | awk '!seen[$0]++' > "$out/vocab.txt"
  printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\nstale\n' > "$out/tr.st.vocab.txt"  # an older run's
  "$tr" --data-dir "$d" --vocab "$out/vocab.txt" --epochs 6 --batch-size 16 --layers 1 --hidden 32 \
        --heads 2 --ffn 64 --max-len 48 --metrics "$out/tr.jsonl" --save-model "$out/tr.st"
  check_metrics "$out/tr.jsonl" 6 0.8
  # no word vocabulary beside a WordPiece model: without its --vocab, a clear error
  [[ ! -e "$out/tr.st.vocab.txt" ]] || { echo "a stale tr.st.vocab.txt was left beside the model"; exit 1; }
  "$here/expect.sh" 1 "needs that --vocab again" -- "$tr" --data-dir "$d" --layers 1 --hidden 32 \
        --heads 2 --ffn 64 --max-len 48 --eval-only --load-model "$out/tr.st"
  "$tr" --data-dir "$d" --vocab "$out/vocab.txt" --layers 1 --hidden 32 --heads 2 --ffn 64 --max-len 48 \
        --eval-only --load-model "$out/tr.st" | grep -E "eval on 80 reviews"
  # a model with a position table past the default 512, read at another length: the table is
  # the model's (it was sized from --max-len and refused to load)
  small_tr=(--data-dir "$d" --layers 1 --hidden 16 --heads 2 --ffn 16 --batch-size 16)
  "$tr" "${small_tr[@]}" --epochs 1 --max-len 600 --save-model "$out/long.st" > /dev/null
  "$tr" "${small_tr[@]}" --max-len 16 --eval-only --load-model "$out/long.st" | grep -E "eval on 80 reviews"
  "$here/expect.sh" 2 "--max-len 700 is longer than the 600 positions of" -- \
    "$tr" "${small_tr[@]}" --max-len 700 --eval-only --load-model "$out/long.st" ;;
bad_inputs)
  e="$here/expect.sh"
  for app in "$mlp" "$tr"; do
    "$e" 2 "give either --data-dir DIR or --data synthetic" -- "$app"
    "$e" 1 "error: .*'/nonexistent" -- "$app" --data-dir /nonexistent
    mkdir -p "$out/empty/train" "$out/empty/test"
    "$e" 1 "error: no label folders in '.*/empty/train'" -- "$app" --data-dir "$out/empty"
    "$e" 2 "--data must be one of synthetic" -- "$app" --data imdb
    "$e" 2 "--precision must be one of fp32, fp16, bf16" -- "$app" --data synthetic --precision fp8
    "$e" 2 "--eval-only needs --load-model" -- "$app" --data synthetic --eval-only
    "$e" 1 "error: .*'/nonexistent" -- "$app" --data-dir /nonexistent --eval-only=false  # off
    "$e" 2 "--vocab-size must be positive, got 0" -- "$app" --data synthetic --vocab-size 0
    "$e" 1 "error: .*'$out/missing.txt'" -- "$app" --data synthetic --vocab "$out/missing.txt"
    # flags are checked before the data is read (a missing folder would be exit 1)
    "$e" 2 "--dropout must be in \[0, 1\), got 1" -- "$app" --data-dir /nonexistent --dropout 1
    "$e" 2 "--relabel must be at least 2, got 1" -- "$app" --data-dir /nonexistent --relabel 1
    # sizes past any real run, refused before they take the machine's memory or disk
    "$e" 2 "--relabel must be at most 1048576" -- "$app" --data-dir /nonexistent --relabel 1000000000000
    "$e" 2 "--synthetic-classes 2 x --synthetic-size 100000000 is over 1048576 training reviews" -- \
         "$app" --data synthetic --synthetic-size 100000000
    "$e" 2 "--synthetic-classes 20000 x --synthetic-size 1000 is over 1048576" -- "$app" --data synthetic \
         --synthetic-classes 20000
    "$e" 2 "--layers must be at most 10000" -- "$app" --data-dir /nonexistent --layers 1000000000000
    "$e" 2 "--threads must be at most 1024" -- "$app" --data-dir /nonexistent --threads 100000
    "$e" 2 "--batch-size must be at most 16777216" -- "$app" --data-dir /nonexistent --batch-size 4611686018427387904
    "$e" 2 "'abc' is not a valid value for --epochs" -- "$app" --data-dir /nonexistent --epochs abc
    "$e" 2 "'1.5' is not a valid value for --seed" -- "$app" --data-dir /nonexistent --seed=1.5
    # the flag that refused it, not the first given the same text
    "$e" 2 "'abc' is not a valid value for --epochs" -- "$app" --data-dir abc --epochs abc
    "$e" 2 "'7x' is not a valid value for --batch-size" -- "$app" --metrics=7x --batch-size=7x
    # input files read after the data: checked before it
    "$e" 1 "cannot read '/nonexistent.st' \(--load-model\): no such file" -- "$app" --data synthetic \
         --synthetic-size 100000 --eval-only --load-model /nonexistent.st
    "$e" 2 "--max-len must be at most 1048576" -- "$app" --data-dir /nonexistent --max-len 4611686018427387904
    "$e" 2 "--epochs must be at most 16777216" -- "$app" --data-dir /nonexistent --epochs 4611686018427387904
    # one class folder trains nothing (it read 100% accuracy at loss 0)
    mkdir -p "$out/one/train/pos" "$out/one/test/pos"
    echo "a fine film" > "$out/one/train/pos/1.txt"; echo "a fine film" > "$out/one/test/pos/1.txt"
    "$e" 1 "has one class folder \('pos'\): a classifier needs at least two" -- "$app" --data-dir "$out/one"
    "$e" 2 "--min-count must be positive" -- "$app" --data-dir /nonexistent --min-count 0
    "$e" 2 "--log-every must be positive, got 0" -- "$app" --data-dir /nonexistent --log-every 0
    "$e" 2 "--keep-last must be at least 1, got 0" -- "$app" --data-dir /nonexistent --keep-last 0
    "$e" 2 "--checkpoint-every must be 0 or more, got -1" -- "$app" --data-dir /nonexistent --checkpoint-every -1
    "$e" 2 "--lr must be a finite number >= 0, got -0.001" -- "$app" --data-dir /nonexistent --lr -1e-3
    "$e" 2 "--weight-decay must be a finite number >= 0" -- "$app" --data-dir /nonexistent --weight-decay -1
    "$e" 2 "--warmup must be in \[0, 1\], got 2" -- "$app" --data-dir /nonexistent --warmup 2
    "$e" 2 "--clip must be a finite number >= 0" -- "$app" --data-dir /nonexistent --clip -1
    "$e" 2 "--vocab-size must be at least 5 \(\[PAD\], \[UNK\], \[CLS\], \[SEP\] and a word\), got 4" -- \
         "$app" --data-dir /nonexistent --vocab-size 4
    "$e" 1 "holds only special tokens such as \[PAD\] and \[UNK\], so every word would read as \[UNK\] \(no word of the training split is there --min-count 1000000 times\)" -- \
         "$app" --data synthetic --synthetic-size 20 --min-count 1000000
    "$e" 2 "--synthetic-classes must be at least 2, got 1" -- "$app" --data synthetic --synthetic-classes 1
    "$e" 2 "--synthetic-classes must be at most 1048576" -- "$app" --data synthetic --synthetic-classes 1000000000000
    # output files too (reading /nonexistent would fail with another message)
    "$e" 1 "cannot open '/nonexistent/m.jsonl' for writing" -- "$app" --data-dir /nonexistent \
         --metrics /nonexistent/m.jsonl
    "$e" 1 "cannot open '/nonexistent/m.jsonl' for writing" -- "$app" --data-dir /nonexistent \
         --eval-only --load-model "$out/none.st" --metrics /nonexistent/m.jsonl
  done
  "$e" 2 "--max-len must be at least 3" -- "$tr" --data-dir /nonexistent --max-len 2
  "$e" 2 "--attention-dropout must be in \[0, 1\), got 1.5" -- "$tr" --data-dir /nonexistent \
       --attention-dropout 1.5
  "$e" 2 "--save-model goes with training, not --eval-only" -- "$mlp" --data-dir /nonexistent \
       --eval-only --load-model "$out/none.st" --save-model "$out/again.st"
  "$e" 2 "--epochs goes with training, not --eval-only" -- "$mlp" --data-dir /nonexistent \
       --eval-only --load-model "$out/none.st" --epochs 5
  "$e" 2 "--min-count goes with training, not --eval-only" -- "$mlp" --data-dir /nonexistent \
       --eval-only --load-model "$out/none.st" --min-count 3
  "$e" 2 "give either --data-dir DIR or --data synthetic" -- "$mlp" --data synthetic --data synthetic \
       --data-dir /nonexistent
  "$e" 2 "--norm pre cannot use them" -- "$tr" --data-dir /nonexistent --pretrained "$out/none.st" --norm pre
  # a vocabulary built from the data would load the checkpoint's embeddings for other words
  "$e" 2 "--pretrained needs the checkpoint's own vocabulary: pass its vocab.txt with --vocab" -- \
       "$tr" --data-dir /nonexistent --pretrained "$out/none.st"
  # a checkpoint's position table is taken at its own length (12 here; the model's default is
  # 512), and a --max-len past it is refused
  hf=$here/../fixtures/hf_bert/model.safetensors
  { printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n'; for i in $(seq 5 49); do echo "w$i"; done; } > "$out/hf_vocab.txt"
  hfa=(--data synthetic --synthetic-classes 3 --synthetic-size 20 --epochs 1 --pretrained "$hf" --vocab "$out/hf_vocab.txt"
       --layers 2 --hidden 16 --heads 4 --ffn 32)
  "$e" 0 "loaded '.*model.safetensors'" -- "$tr" "${hfa[@]}" --max-len 12
  "$e" 2 "--max-len 16 is longer than the 12 positions of '.*model.safetensors'" -- "$tr" "${hfa[@]}" --max-len 16
  "$e" 2 "--layers must be 0 or more, got -1" -- "$mlp" --data-dir /nonexistent --layers -1
  "$e" 2 "--preset must be one of tiny, mini, base" -- "$tr" --data-dir /nonexistent --preset huge
  "$e" 2 "hidden size \(64\) must be a multiple of the heads \(5\)" -- "$tr" --data-dir /nonexistent \
       --hidden 64 --heads 5
  # a model saved for 2 classes does not evaluate 3 (its class names are the first two)
  "$mlp" --data synthetic --synthetic-size 50 --epochs 1 --save-model "$out/m2.st" >/dev/null
  "$e" 1 "error: the synthetic set's class 'class_2' is not one of the model's classes \(class_0, class_1\)" -- "$mlp" --data synthetic --synthetic-size 50 --synthetic-classes 3 \
       --eval-only --load-model "$out/m2.st"
  # a model of the other program is refused by name
  "$e" 1 "error: '$out/m2.st' was written by mlp_train, not transformer_train" -- "$tr" --data synthetic \
       --synthetic-size 50 --eval-only --load-model "$out/m2.st"
  # a model beside another run's vocabulary (a run killed between the two writes) is refused
  "$mlp" --data synthetic --synthetic-size 50 --epochs 1 --vocab-size 20 --save-model "$out/m3.st" >/dev/null
  cp "$out/m3.st.vocab.txt" "$out/m4.st.vocab.txt"
  cp "$out/m2.st" "$out/m4.st"
  "$e" 1 "'$out/m4.st' was trained with another vocabulary" -- "$mlp" --data synthetic --synthetic-size 50 \
       --eval-only --load-model "$out/m4.st"
  # batch inference flags
  "$e" 2 "--predictions and --shard go with --eval-only" -- "$mlp" --data synthetic --predictions "$out/p.jsonl"
  "$e" 2 "--shard must be I/N with 0 <= I < N, got '3/3'" -- "$mlp" --data synthetic --synthetic-size 50 \
       --eval-only --load-model "$out/m2.st" --shard 3/3
  "$e" 2 "--shard must be I/N" -- "$mlp" --data synthetic --eval-only --load-model "$out/m2.st" --shard 1/2x
  "$e" 2 "--shard must be I/N" -- "$mlp" --data synthetic --eval-only --load-model "$out/m2.st" \
       --shard 0/99999999999999999999
  "$e" 2 "not with --world-size > 1" -- "$mlp" --data synthetic --eval-only --load-model "$out/m2.st" \
       --shard 0/2 --world-size 2
  "$e" 1 "cannot open '$out/none/p.jsonl' for writing \(--predictions\)" -- "$mlp" --data synthetic \
       --synthetic-size 50 --eval-only --load-model "$out/m2.st" --predictions "$out/none/p.jsonl"
  # an output folder that does not exist fails before training, not after it
  "$e" 1 "cannot open '$out/none/m.st' for writing \(--save-model\): folder '$out/none' does not exist" -- \
       "$mlp" --data synthetic --save-model "$out/none/m.st"
  "$e" 2 "--preset must be one of tiny, mini, base" -- "$tr" --data synthetic --preset huge
  "$e" 2 "--norm must be one of pre, post" -- "$tr" --data synthetic --norm mid ;;
*) echo "unknown case $case_"; exit 2 ;;
esac
