"""Create a Bitrix24 deal under retryd's loop: a timeout after the write went
through is settled by a read-back by business key, never by a blind resend.

    pip install ./clients/python && RETRYD_ADDR=localhost:50051 python deal_add.py
"""
import os

import retryd


class Crm:
    """Stands in for a Bitrix24 REST client: the first add is applied, then its answer is lost."""

    def __init__(self):
        self.deals, self.calls = {}, 0

    def add_deal(self, fields):
        self.calls += 1
        self.deals.setdefault(fields["ORIGIN_ID"], f"deal-{len(self.deals) + 1}")
        if self.calls == 1:
            raise retryd.DependencyError("BITRIX_TIMEOUT")
        return self.deals[fields["ORIGIN_ID"]]

    def find_deal(self, origin_id):
        return self.deals.get(origin_id)  # None: absent


crm, fields = Crm(), {"TITLE": "Order #1042", "ORIGIN_ID": "order-1042"}
with retryd.Client(os.environ.get("RETRYD_ADDR", "localhost:50051"), catalog="vibecode",
                   dependency="portal-7.bitrix24.eu", tenant="acme") as client:
    deal_id = client.call(lambda: crm.add_deal(fields), operation="write", method="crm.deal.add",
                          read_back=lambda: crm.find_deal(fields["ORIGIN_ID"]), deadline=30)
assert len(crm.deals) == 1 and crm.calls == 1
print(f"python: {deal_id} created once, found by its read-back")
