# The strata-minio image: the pinned MinIO server (built with
# CGO_ENABLED=0, see `make minio-static`) and the strata CLI for its health
# check. No base image is pulled.
#
# The bucket "strata" exists from the first start: the image's /data holds
# an empty directory data/strata, which a single-drive MinIO lists as a
# bucket; a new named volume mounted at /data is seeded with it.
FROM scratch
COPY bin/ /usr/local/bin/
COPY --chown=65532:65532 data/ /data/
COPY --chown=65532:65532 empty/ /tmp/
ENV PATH=/usr/local/bin \
    HOME=/tmp \
    MINIO_UPDATE=off \
    MINIO_BROWSER=off
USER 65532:65532
WORKDIR /data
VOLUME /data
EXPOSE 9000
HEALTHCHECK --interval=5s --timeout=4s --start-period=5s --retries=3 CMD ["strata", "node", "health", "--timeout", "3s", "--admin", "127.0.0.1:9000", "--path", "/minio/health/ready"]
ENTRYPOINT ["minio"]
CMD ["server", "/data", "--address", ":9000", "--quiet"]
