document.getElementById("status").textContent = "Scripts ran: the page and its assets arrived.";
