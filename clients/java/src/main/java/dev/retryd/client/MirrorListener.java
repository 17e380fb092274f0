package dev.retryd.client;

/**
 * Hears the holds mirror change state ({@code RetrydClient.Builder.mirrorListener}). Called on a gRPC thread:
 * return quickly, never block.
 */
public interface MirrorListener {
  /** The watch stream went down (retryd restarting, the network): known holds still refuse, other calls ask Admit. */
  default void stale(Throwable cause) { }

  /** A snapshot arrived (the first, a wider one, or after a reconnect): calls admit locally again. */
  default void synced(int holds) { }
}
