package dev.retryd.client;

import dev.retryd.v1.RetryDecisionServiceGrpc;
import io.grpc.ManagedChannel;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import java.util.HashMap;
import java.util.Map;

/**
 * One holds mirror and one WatchHolds stream per retryd address in a process (per channel, for clients given one),
 * shared by every client to it: a service with a client per dependency opens one stream, not one per client (retryd
 * caps watch streams per caller, 64 by default). The mirror is closed with its last client. Its maxHolds is the first
 * client's.
 */
final class SharedMirror {
  private static final Map<Object, SharedMirror> SHARED = new HashMap<>();

  final HoldsMirror mirror;
  final MirrorWatch watch;
  private final Object key;
  /** The stream's own channel when the clients build theirs (a client's may close before the others'). */
  private final ManagedChannel owned;
  private int users;

  private SharedMirror(Object key, ManagedChannel channel, boolean owned, int maxHolds) {
    this.key = key;
    this.owned = owned ? channel : null;
    this.mirror = new HoldsMirror(maxHolds);
    this.watch = new MirrorWatch(mirror, RetryDecisionServiceGrpc.newStub(channel));
  }

  /** The mirror of {@code address} (plaintext, its own channel) or of {@code given} (a channel of the caller's). */
  static SharedMirror acquire(String address, ManagedChannel given, int maxHolds) {
    Object key = given != null ? given : "address:" + address;
    synchronized (SHARED) {
      SharedMirror m = SHARED.get(key);
      if (m == null) {
        ManagedChannel ch = given != null ? given : NettyChannelBuilder.forTarget(address).usePlaintext().build();
        m = new SharedMirror(key, ch, given == null, maxHolds);
        SHARED.put(key, m);
      }
      m.users++;
      return m;
    }
  }

  /** A client is done with it; the last one closes the stream (and its channel). */
  void release() {
    synchronized (SHARED) {
      if (--users > 0) {
        return;
      }
      SHARED.remove(key);
    }
    watch.close();
    if (owned != null) {
      owned.shutdown();
    }
  }
}
