#!/usr/bin/env bash
# Coverage-guided fuzzing of every input kpct reads from outside, one libFuzzer target per
# surface of `kpct::fuzz_surfaces` (fuzz/fuzz_targets/). cargo-fuzz, because libFuzzer runs
# in-process (tens of thousands of parser runs a second on this 2-core machine, where AFL's
# fork server pays a process per run) and needs nothing but nightly Rust and a C++ compiler;
# cargo-afl would also build AFL++ from C. No sanitizer: the surfaces are safe Rust, and
# without ASan each run is several times faster; overflow checks and debug assertions stay on.
#
#   ci/fuzz.sh [SECONDS] [TARGET...]  run each target (default: all) SECONDS (default 60) from
#                                     its corpus; prints runs, new inputs and findings per
#                                     target; exits 1 when any target found something
#   ci/fuzz.sh --seed                 (re)write the seed inputs of every corpus from the
#                                     repository's own fixtures, scenarios and built-ins
#   ci/fuzz.sh --minimize [TARGET...] shrink each corpus to the inputs that keep its coverage
#
# New inputs a run finds are added to fuzz/corpus/TARGET/, a failing input is written to
# fuzz/artifacts/TARGET/; commit both: `cargo test --test fuzz_corpora` runs them all, on
# stable Rust, in CI. Needs `rustup toolchain install nightly` and `cargo install cargo-fuzz`.
set -euo pipefail
cd "$(dirname "$0")/.."
read -ra targets_all <<< "scenario programming_text replay_capture ipvs_netlink netfilter_netlink api_request"

need_fuzzer() {
    if ! cargo +nightly --version >/dev/null 2>&1; then
        echo "ci/fuzz.sh: needs nightly Rust: rustup toolchain install nightly" >&2
        exit 2
    fi
    if ! cargo fuzz --version >/dev/null 2>&1; then
        echo "ci/fuzz.sh: needs cargo-fuzz: cargo install cargo-fuzz" >&2
        exit 2
    fi
}

# Each seed is named by its content's SHA-1, as libFuzzer names the inputs it keeps.
keep() { # TARGET FILE
    local dir="fuzz/corpus/$1"
    mkdir -p "$dir"
    cp "$2" "$dir/$(sha1sum "$2" | cut -c1-40)"
}

seed() {
    cargo build --quiet --bin kpct
    local kpct=target/debug/kpct tmp
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    # Scenario files: the library and every malformed fixture.
    for f in scenarios/*.yaml harness/tests/fixtures/bad/*.yaml; do keep scenario "$f"; done
    # Programming text and replay captures: what the built-ins program for a spread of
    # scenarios, in the suite's text format and as each tool prints it.
    local s p
    local seeded="clusterip-cross-node nodeport-etp-local dual-stack-clusterip ipv6-only-nodeport-external"
    seeded+=" session-affinity-clientip loadbalancer-source-ranges sctp-services ipvs-timeouts"
    for s in $seeded; do
        for p in kube-proxy-iptables kube-proxy-ipvs kube-proxy-nftables; do
            "$kpct" program --proxier "$p" --node node-a "scenarios/$s.yaml" >"$tmp/text" 2>/dev/null || continue
            keep programming_text "$tmp/text"
            local view part=()
            for view in iptables-save ip6tables-save ipset ipvsadm; do
                "$kpct" program --proxier "$p" --node node-a --view "$view" "scenarios/$s.yaml" \
                    >"$tmp/$view" 2>/dev/null || : >"$tmp/$view"
            done
            "$kpct" program --proxier "$p" --node node-a --view nft "scenarios/$s.yaml" \
                >"$tmp/nft" 2>/dev/null || : >"$tmp/nft"
            # iptables-save, ip6tables-save, ipset-save, ipvsadm-Sn, kube-ipvs0, sysctl,
            # nft-ruleset, joined by NUL (see fuzz_surfaces::replay_capture).
            {
                cat "$tmp/iptables-save"; printf '\0'
                cat "$tmp/ip6tables-save"; printf '\0'
                cat "$tmp/ipset"; printf '\0'
                cat "$tmp/ipvsadm"; printf '\0'
                printf '    inet 10.96.0.1/32 scope global kube-ipvs0\n    inet6 fd00:10:96::1/128 scope global\n'; printf '\0'
                printf 'net.ipv4.vs.conntrack = 1\nnet.ipv4.conf.all.route_localnet = 1\n'; printf '\0'
                cat "$tmp/nft"
            } >"$tmp/capture"
            keep replay_capture "$tmp/capture"
        done
    done
    {
        cat harness/tests/fixtures/replay/node-a/iptables-save; printf '\0\0'
        cat harness/tests/fixtures/replay/node-a/ipset-save
    } >"$tmp/capture"
    keep replay_capture "$tmp/capture"
    # IPVS replies: messages ipvs-genl's own tests build.
    KPCT_FUZZ_SEEDS="$tmp/ipvs" cargo test --quiet -p ipvs-genl --lib -- --ignored write_fuzz_seeds >/dev/null
    for f in "$tmp"/ipvs/*; do keep ipvs_netlink "$f"; done
    # nfnetlink replies: conntrack and table dumps, trace events, rules, as kpct's tests build them.
    KPCT_FUZZ_SEEDS="$tmp/netfilter" cargo test --quiet -p kpct --lib -- --ignored write_fuzz_seeds >/dev/null
    for f in "$tmp"/netfilter/*; do keep netfilter_netlink "$f"; done
    # API requests, as kube-proxy, kube-router and kube-rs send them.
    local req i=0
    for req in \
        'GET /api HTTP/1.1\r\nHost: x\r\nAccept: application/json, */*\r\n\r\n' \
        'GET /apis HTTP/1.1\r\nHost: x\r\nAccept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json\r\n\r\n' \
        'GET /api/v1/nodes/node-a HTTP/1.1\r\nHost: x\r\n\r\n' \
        'GET /api/v1/nodes?fieldSelector=metadata.name%3Dnode-a&limit=500&resourceVersion=0 HTTP/1.1\r\nHost: x\r\n\r\n' \
        'GET /api/v1/services?labelSelector=%21service.kubernetes.io%2Fheadless%2C%21service.kubernetes.io%2Fservice-proxy-name&limit=500&resourceVersion=0 HTTP/1.1\r\nHost: x\r\n\r\n' \
        'GET /api/v1/services?fieldSelector=spec.clusterIP%21%3DNone&limit=1 HTTP/1.1\r\nHost: x\r\n\r\n' \
        'GET /apis/discovery.k8s.io/v1/endpointslices?limit=1&continue=eyJydiI6MX0 HTTP/1.1\r\nHost: x\r\n\r\n' \
        'GET /apis/discovery.k8s.io/v1/endpointslices?allowWatchBookmarks=true&resourceVersion=3&timeoutSeconds=60&watch=true HTTP/1.1\r\nHost: x\r\n\r\n' \
        'GET /apis/discovery.k8s.io/v1/endpointslices?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&watch=true HTTP/1.1\r\nHost: x\r\n\r\n' \
        'GET /api/v1/pods?watch=1&resourceVersion=999999 HTTP/1.1\r\nHost: x\r\n\r\n' \
        'GET /apis/networking.k8s.io/v1/servicecidrs?limit=500 HTTP/1.1\r\nHost: x\r\n\r\n' \
        'GET /apis/networking.k8s.io/v1/networkpolicies HTTP/1.1\r\nHost: x\r\n\r\n' \
        'GET /api/v1/namespaces/default/services/kubernetes HTTP/1.1\r\nHost: x\r\n\r\n' \
        'POST /apis/events.k8s.io/v1/namespaces/default/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 94\r\n\r\n{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"e1","namespace":"default"}}' \
        'PATCH /apis/events.k8s.io/v1/namespaces/default/events/e1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/strategic-merge-patch+json\r\nContent-Length: 2\r\n\r\n{}' \
        'DELETE /api/v1/nodes/node-a HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n' \
        'GET /api/v1/services HTTP/1.1\r\nHost: x\r\nAccept: application/vnd.kubernetes.protobuf\r\n\r\n'; do
        printf '%b' "$req" >"$tmp/req-$i"
        keep api_request "$tmp/req-$i"
        i=$((i + 1))
    done
    for t in "${targets_all[@]}"; do
        echo "$t: $(find "fuzz/corpus/$t" -type f | wc -l) inputs"
    done
}

run() {
    local seconds=$1
    shift
    local targets=("$@") t failed=0
    [ ${#targets[@]} -gt 0 ] || targets=("${targets_all[@]}")
    need_fuzzer
    # Built first, so that each target's time is spent fuzzing.
    for t in "${targets[@]}"; do
        (cd fuzz && cargo +nightly fuzz build --sanitizer none "$t" 2>&1 | grep -E '^error' -A5) && exit 2
    done
    printf '%-18s %12s %10s %8s  %s\n' target runs runs/s corpus findings
    for t in "${targets[@]}"; do
        local log before after status=0
        log=$(mktemp)
        before=$(find "fuzz/corpus/$t" -type f 2>/dev/null | wc -l)
        (cd fuzz && cargo +nightly fuzz run --sanitizer none "$t" "corpus/$t" -- \
            -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
            >"$log" 2>&1) || status=$?
        after=$(find "fuzz/corpus/$t" -type f | wc -l)
        local runs found
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        found=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | sed 's#^\./#fuzz/#')
        if [ "$status" -ne 0 ]; then
            failed=1
            [ -n "$found" ] || found="exit $status, see below"
        fi
        printf '%-18s %12s %10s %8s  %s\n' "$t" "${runs:-?}" "$(( ${runs:-0} / seconds ))" \
            "$before→$after" "${found:-none}"
        if [ "$status" -ne 0 ]; then
            grep -E 'panicked|ERROR|SUMMARY|timeout|out-of-memory' "$log" | head -5 | sed 's/^/    /'
        fi
        rm -f "$log"
    done
    return $failed
}

minimize() {
    local targets=("$@") t
    [ ${#targets[@]} -gt 0 ] || targets=("${targets_all[@]}")
    need_fuzzer
    for t in "${targets[@]}"; do
        (cd fuzz && cargo +nightly fuzz cmin --sanitizer none "$t" "corpus/$t" >/dev/null 2>&1)
        echo "$t: $(find "fuzz/corpus/$t" -type f | wc -l) inputs"
    done
}

case "${1:-}" in
    --seed) seed ;;
    --minimize) shift; minimize "$@" ;;
    ''|[0-9]*) seconds=${1:-60}; shift || true; run "$seconds" "$@" ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' ;;
    -*) echo "ci/fuzz.sh: unknown option $1 (see ci/fuzz.sh --help)" >&2; exit 2 ;;
    *) run 60 "$@" ;;
esac
