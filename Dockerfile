# syntax=docker/dockerfile:1
# ratelane: a static binary on a distroless base, running as non-root.
#   docker build -t ratelane .
#   docker run -p 8080:8080 -v ratelane-data:/data ratelane
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# modernc.org/sqlite is pure Go, so the binary links statically without cgo.
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" -o /out/ratelane ./cmd/ratelane \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ratelane /usr/local/bin/ratelane
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
VOLUME /data
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/ratelane"]
CMD ["serve", "--addr", "0.0.0.0:8080", "--data", "/data"]
