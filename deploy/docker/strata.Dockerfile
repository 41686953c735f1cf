# The strata image: the four static binaries (metad, bookie, broker and the
# strata CLI) and nothing else. Built by `make images` from a context that
# holds bin/ (CGO_ENABLED=0 builds) and an empty directory empty/; no base
# image is pulled.
#
# Which role runs is the command: `metad`, `bookie` or `broker`, configured
# by flags, a YAML file (--config) or STRATA_* variables (STRATA_DATA_DIR=
# /data is preset). The health check probes the node's admin address
# (STRATA_ADMIN_LISTEN) without a shell: `strata node health`.
FROM scratch
COPY bin/ /usr/local/bin/
# /data is the volume of metad and the bookies; /tmp for anything that
# wants a temporary directory. Both owned by the non-root user.
COPY --chown=65532:65532 empty/ /data/
COPY --chown=65532:65532 empty/ /tmp/
# GODEBUG: the Go runtime returns memory with MADV_FREE, so a broker's
# tier chunk cache does not fault its buffers back in on every reuse
# (docs/tiering.md, "Reads"); RSS then falls only under memory pressure.
ENV PATH=/usr/local/bin \
    HOME=/tmp \
    STRATA_DATA_DIR=/data \
    GODEBUG=madvdontneed=0
USER 65532:65532
WORKDIR /data
VOLUME /data
HEALTHCHECK --interval=5s --timeout=4s --start-period=5s --retries=3 CMD ["strata", "node", "health", "--timeout", "3s"]
CMD ["strata", "--help"]
