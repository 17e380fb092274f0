package dev.retryd.client;

/**
 * Where the client's holds mirror stands, what it saved, and what retryd's shed advice held back:
 * {@link RetrydClient#stats()}.
 *
 * @param synced a snapshot covering this client's dependency and tenant has arrived and the stream is up (calls
 *     admit locally)
 * @param stale the watch stream is down: known holds still refuse, every other call asks Admit
 * @param holds holds in the mirror (shared by the clients of one address; at most {@code maxHolds})
 * @param admitRpcs Admit RPCs sent
 * @param localAdmissions attempts the mirror admitted with no RPC
 * @param localRefusals attempts the mirror refused by a hold with no RPC
 * @param reportRpcs ReportOutcomes RPCs sent (batches of counts and probe outcomes)
 * @param reportedRequests first attempts sent in those batches (the budgets' deposits; a batch retryd shed is counted
 *     when it is sent again)
 * @param shedAnswers answers of retryd shedding a call (RESOURCE_EXHAUSTED or UNAVAILABLE with retry advice):
 *     this client's RPCs', and the shared watch stream's
 * @param busySkips RPCs (Admit, Classify, ReportOutcomes) not sent because retryd advised waiting
 * @param resumedSyncs watch snapshots that resumed the mirror from its bucket digests (the shared watch's)
 * @param resentBuckets buckets those resumed snapshots resent (sum)
 */
public record MirrorStats(boolean synced, boolean stale, int holds, long admitRpcs, long localAdmissions,
    long localRefusals, long reportRpcs, long reportedRequests, long shedAnswers, long busySkips, long resumedSyncs,
    long resentBuckets) {
  /** The stats before shed advice and resuming (those counters 0). */
  public MirrorStats(boolean synced, boolean stale, int holds, long admitRpcs, long localAdmissions,
      long localRefusals, long reportRpcs, long reportedRequests) {
    this(synced, stale, holds, admitRpcs, localAdmissions, localRefusals, reportRpcs, reportedRequests, 0, 0, 0, 0);
  }
}
